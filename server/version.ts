// The release this gateway is (docs/RELEASES.md): the root package.json's version, one number for the
// gateway, the admin CLI, the agent and the panel (test/unit/version.test.ts keeps the workspaces' equal).
// Imported rather than read from disk so a build or a bundle carries it.
import rootPackage from '../package.json' with { type: 'json' };

export const VERSION: string = rootPackage.version;
