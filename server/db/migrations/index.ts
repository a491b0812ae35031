// Every migration, in order. Listed explicitly so the runner needs no file-system discovery
// (the same list works from TypeScript sources and from a build).
import { Migration20261121000000_initial } from './Migration20261121000000_initial.ts';

export const migrationsList = [{ name: 'Migration20261121000000_initial', class: Migration20261121000000_initial }];
