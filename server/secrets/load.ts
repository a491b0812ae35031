// The secret loader: every server secret from the environment or, when absent there, generated once
// and stored in the `server_secret` table, so every replica and the admin CLI agree. Generation is
// race-safe across replicas (insert ... on conflict do nothing, then read back whichever row won). A
// stored value is never regenerated: one that no longer parses stops the process with an error naming
// the secret. Environment values are validated and never written to the database; only a fingerprint of
// each (a public-key thumbprint or an HMAC of a constant) is recorded, so that a process started
// without the gateway's variables, or with other values in them, refuses to run instead of disagreeing
// with it (SECRETS_ROTATE names the variables a rotation may change). SECRETS_FROM_ENV=required
// turns the database fallback off.
//
// The gateway should warn at start when any secret came from the database (`startupWarning`):
// production should pass them all in the environment.
import type { Database } from '../db/database.ts';
import { FIELD, SECRET_ENV, SECRET_NAMES, SPECS, type SecretName, type ServerSecrets } from './catalog.ts';
import { SecretsError } from './errors.ts';

export type SecretSource = 'env' | 'database' | 'generated';

export interface LoadedSecrets {
  secrets: ServerSecrets;
  /** Secrets this call generated and stored (it won the insert). */
  generated: SecretName[];
  /** Where each secret came from: the environment, a row stored earlier, or generated just now. */
  sources: Record<SecretName, SecretSource>;
}

type Query = Pick<Database, 'query'>;

/**
 * Every server secret: from `env` when set there (validated; a bad value is an error, never replaced),
 * otherwise from `server_secret`, generating and storing it first if no replica has yet.
 *
 * A process that takes a secret from its environment records that secret's fingerprint (never the
 * value) as the row `env_fingerprint.<name>`. A later process without that variable then refuses to
 * start instead of quietly using the stored or a freshly generated value, which would disagree with
 * the gateway (an admin CLI run without the gateway's environment would otherwise encrypt client
 * secrets with the wrong key and print the wrong public keys). Deleting the row undoes the choice.
 * A process whose variable holds another value than the recorded one (a stale .env) is refused the
 * same way, naming the variable, and writes nothing; only SECRETS_ROTATE naming that variable lets it
 * record the new fingerprint (the rotation step of docs/OPERATOR.md).
 */
export async function loadSecrets(db: Query, env: NodeJS.ProcessEnv = process.env): Promise<LoadedSecrets> {
  requireSecretsFromEnv(env);
  const values: Partial<Record<keyof ServerSecrets, unknown>> = {};
  const generated: SecretName[] = [];
  const sources = {} as Record<SecretName, SecretSource>;
  const fromEnvNames = SECRET_NAMES.filter((n) => (env[SECRET_ENV[n]] ?? '').trim() !== '');
  const marks = await db.query<{ name: string; value: string }>('select name, value from server_secret where name like ?', [`${ENV_MARK}%`]);
  const missing = marks.map((m) => m.name.slice(ENV_MARK.length) as SecretName).filter((n) => SECRET_NAMES.includes(n) && !fromEnvNames.includes(n));
  if (missing.length) {
    const vars = missing.map((n) => SECRET_ENV[n]).join(', ');
    throw new SecretsError(
      `the gateway takes ${missing.join(', ')} from its environment, but ${vars} ${missing.length > 1 ? 'are' : 'is'} not set here: ` +
        `run with the same ${vars} as the gateway (or delete the server_secret rows ${missing.map((n) => ENV_MARK + n).join(', ')} ` +
        'to go back to the stored values)',
    );
  }
  // Every environment value is parsed and checked against the fingerprint recorded earlier before
  // anything is written: a refused start leaves the database exactly as it was.
  const rotate = rotationOverride(env);
  const fromEnvValues = new Map<SecretName, { value: unknown; fingerprint: string }>();
  for (const name of fromEnvNames) {
    const variable = SECRET_ENV[name];
    let value: unknown;
    try {
      value = SPECS[name].parse(env[variable]!);
    } catch (e) {
      throw new SecretsError(`${variable}: ${(e as Error).message}`);
    }
    fromEnvValues.set(name, { value, fingerprint: SPECS[name].fingerprint(value) });
  }
  const recorded = new Map(marks.map((m) => [m.name.slice(ENV_MARK.length), m.value]));
  const mismatched = fromEnvNames.filter((n) => recorded.has(n) && recorded.get(n) !== fromEnvValues.get(n)!.fingerprint && !rotate.has(SECRET_ENV[n]));
  if (mismatched.length) throw mismatchError(mismatched);
  for (const name of SECRET_NAMES) {
    const spec = SPECS[name];
    const variable = SECRET_ENV[name];
    const fromEnv = fromEnvValues.get(name);
    if (fromEnv) {
      // Replaced only when this process was told to (SECRETS_ROTATE names the variable); otherwise a
      // first record, and a concurrent start with another value loses the insert and is refused below.
      await db.query(
        rotate.has(variable)
          ? `insert into server_secret (name, value) values (?, ?)
             on conflict (name) do update set value = excluded.value where server_secret.value <> excluded.value`
          : 'insert into server_secret (name, value) values (?, ?) on conflict (name) do nothing',
        [`${ENV_MARK}${name}`, fromEnv.fingerprint],
      );
      const [row] = await db.query<{ value: string }>('select value from server_secret where name = ?', [`${ENV_MARK}${name}`]);
      if (row && row.value !== fromEnv.fingerprint) throw mismatchError([name]);
      values[FIELD[name]] = fromEnv.value;
      sources[name] = 'env';
      continue;
    }
    const { value, created } = await storedOrGenerated(db, name, spec.generate);
    try {
      values[FIELD[name]] = spec.parse(value);
    } catch (e) {
      // Never regenerate silently: a replaced key would orphan every agent, token and client secret.
      throw new SecretsError(
        `the stored server secret ${name} is unusable (${(e as Error).message}); ` +
          `fix or delete the row in server_secret deliberately, or set ${variable}`,
      );
    }
    sources[name] = created ? 'generated' : 'database';
    if (created) generated.push(name);
  }
  const secrets = values as ServerSecrets;
  // Keep key material out of logs and JSON by accident.
  Object.defineProperty(secrets, 'toJSON', { value: () => '[server secrets]', enumerable: false });
  Object.defineProperty(secrets, Symbol.for('nodejs.util.inspect.custom'), { value: () => '[server secrets]', enumerable: false });
  return { secrets, generated, sources };
}

/**
 * SECRETS_FROM_ENV (docs/CONTRACTS.md "Starting it"): `required` makes every secret an environment variable, so none is
 * ever generated into (or read from) the database; unset or `optional` keeps the database fallback.
 */
function secretsFromEnvRequired(env: NodeJS.ProcessEnv): boolean {
  const raw = (env.SECRETS_FROM_ENV ?? '').trim().toLowerCase();
  if (raw === '' || raw === 'optional') return false;
  if (raw === 'required') return true;
  throw new SecretsError(`SECRETS_FROM_ENV must be "required" or "optional", got ${JSON.stringify(env.SECRETS_FROM_ENV)}`);
}

/**
 * With SECRETS_FROM_ENV=required, throws naming every secret variable that is unset or empty (the
 * names only: values never appear in an error). Checked before the database is opened.
 */
export function requireSecretsFromEnv(env: NodeJS.ProcessEnv): void {
  if (!secretsFromEnvRequired(env)) return;
  const missing = SECRET_NAMES.map((n) => SECRET_ENV[n]).filter((v) => (env[v] ?? '').trim() === '');
  if (missing.length) {
    throw new SecretsError(`SECRETS_FROM_ENV=required, but ${missing.join(', ')} ${missing.length > 1 ? 'are' : 'is'} not set`);
  }
}

/**
 * SECRETS_ROTATE (docs/OPERATOR.md "Rotating the job-signing key", docs/CONFIGURATION.md): the secret variables, comma-separated,
 * whose new value this process may record in place of the fingerprint stored by an earlier one. Set for
 * the one start that rotates, then removed; a name that is not a secret variable is an error, so a typo
 * does not quietly leave the check on.
 */
function rotationOverride(env: NodeJS.ProcessEnv): Set<string> {
  const names = (env.SECRETS_ROTATE ?? '').split(',').map((v) => v.trim()).filter((v) => v !== '');
  const known = SECRET_NAMES.map((n) => SECRET_ENV[n]);
  const unknown = names.filter((v) => !known.includes(v));
  if (unknown.length) throw new SecretsError(`SECRETS_ROTATE names ${unknown.join(', ')}, which ${unknown.length > 1 ? 'are not secret variables' : 'is not a secret variable'}: one or more of ${known.join(', ')}`);
  return new Set(names);
}

/** One line naming each variable whose value differs from the one the gateway recorded, never a value. */
function mismatchError(names: SecretName[]): SecretsError {
  const vars = names.map((n) => SECRET_ENV[n]).join(', ');
  return new SecretsError(
    `${vars} ${names.length > 1 ? 'differ' : 'differs'} from the value the gateway recorded: refusing to start with a stale key; ` +
      `use the gateway's value, or to rotate set SECRETS_ROTATE=${names.map((n) => SECRET_ENV[n]).join(',')} for this one start (docs/OPERATOR.md)`,
  );
}

/** Row-name prefix of the fingerprints recorded for secrets taken from the environment. */
export const ENV_MARK = 'env_fingerprint.';

async function storedOrGenerated(db: Query, name: SecretName, generate: () => string): Promise<{ value: string; created: boolean }> {
  const [existing] = await db.query<{ value: string }>('select value from server_secret where name = ?', [name]);
  if (existing) return { value: existing.value, created: false };
  // Several replicas may start at once: exactly one insert wins, everyone reads the winner back.
  const inserted = await db.query<{ name: string }>(
    'insert into server_secret (name, value) values (?, ?) on conflict (name) do nothing returning name',
    [name, generate()],
  );
  const [row] = await db.query<{ value: string }>('select value from server_secret where name = ?', [name]);
  if (!row) throw new SecretsError(`server secret ${name} vanished right after it was stored`);
  return { value: row.value, created: inserted.length > 0 };
}

/**
 * The start-up warning the gateway logs when any secret lives in the database; null when none does.
 * Each secret is named once, by the variable that would take it from the environment (what an operator
 * sets), with "generated now" beside those this start created.
 */
export function startupWarning(loaded: Pick<LoadedSecrets, 'sources' | 'generated'>): string | null {
  const stored = SECRET_NAMES.filter((n) => loaded.sources[n] !== 'env');
  if (!stored.length) return null;
  const allGenerated = stored.every((n) => loaded.generated.includes(n));
  const names = stored.map((n) => (!allGenerated && loaded.generated.includes(n) ? `${SECRET_ENV[n]} (generated now)` : SECRET_ENV[n]));
  const what = allGenerated ? 'server secrets generated now and kept in the database' : 'server secrets kept in the database';
  return `${what}, not taken from the environment: ${names.join(', ')}. Production should set ${stored.length > 1 ? 'these variables' : 'this variable'}.`;
}
