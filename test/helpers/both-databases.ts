// The two databases a gateway runs on, for tests that must hold on each: PostgreSQL (a fresh database on
// the test server) and the embedded PGlite of `npm start` (a fresh directory). Their drivers differ under
// the SQL (row modes, how int8, timestamps and jsonb come back, the transaction path), and such a
// difference once hid behind PostgreSQL-only tests; `describe.each(BOTH_DATABASES)` runs the same assertions on each.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Config } from '../../server/config.ts';
import type { Database } from '../../server/db/database.ts';
import type { Services } from '../../server/services.ts';
import { bootEmbeddedGateway } from './embedded-gateway.ts';
import { startGateway } from './gateway.ts';

export interface Backend {
  url: string;
  db: Database;
  services: Services;
  close(): Promise<void>;
}

/** Test gateways never trip the limiter and answer 202 quickly (no agent here). */
const config: Partial<Config> = { rateLimitPerMinute: 1_000_000, rateLimitBurst: 100_000, edgeWaitMs: 300 };

export const BOTH_DATABASES: [string, () => Promise<Backend>][] = [
  [
    'PostgreSQL',
    async () => {
      const gw = await startGateway({ config });
      return { url: gw.url, db: gw.testDb.db, services: gw.services, close: () => gw.close() };
    },
  ],
  [
    'the embedded database (PGlite)',
    async () => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tg-both-'));
      const gw = await bootEmbeddedGateway(dir, { config });
      return {
        url: gw.url,
        db: gw.db,
        services: gw.services,
        async close() {
          await gw.close();
          fs.rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  ],
];
