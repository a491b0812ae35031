// Writes schema/schema.graphql from the code (`npm run schema:graphql`). A test fails when the
// checked-in file differs from what this prints.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildGraphqlSchema, printGraphqlSchema } from './schema.ts';

export const SCHEMA_FILE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../schema/schema.graphql');

async function main(): Promise<void> {
  const text = printGraphqlSchema(await buildGraphqlSchema());
  fs.mkdirSync(path.dirname(SCHEMA_FILE), { recursive: true });
  const before = fs.existsSync(SCHEMA_FILE) ? fs.readFileSync(SCHEMA_FILE, 'utf8') : null;
  if (before === text) {
    process.stdout.write(`${path.relative(process.cwd(), SCHEMA_FILE)} is up to date\n`);
    return;
  }
  fs.writeFileSync(SCHEMA_FILE, text);
  process.stdout.write(`wrote ${path.relative(process.cwd(), SCHEMA_FILE)}\n`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((e: unknown) => {
    process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  });
}
