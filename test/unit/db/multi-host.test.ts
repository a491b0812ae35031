// The multi-host DATABASE_URL as libpq spells it (server/db/multi-host.ts), and which errors count as "the
// database is out of reach for now" (server/db/unavailable.ts: 503 unavailable, never 500).
import { describe, expect, it } from 'vitest';
import { NoPrimaryError, needsLocator, parseDatabaseUrl, pgConfig } from '../../../server/db/multi-host.ts';
import { isDatabaseUnavailable } from '../../../server/db/unavailable.ts';
import { ApiError } from '../../../server/domain/errors.ts';

describe('parseDatabaseUrl', () => {
  it('reads every host, its port (5432 by default) and target_session_attrs', () => {
    const t = parseDatabaseUrl('postgresql://app:s%40cret@db1:6001,db2,[::1]:6003/tunnelgate?target_session_attrs=read-write&sslmode=disable');
    expect(t.hosts).toEqual([
      { host: 'db1', port: 6001 },
      { host: 'db2', port: 5432 },
      { host: '::1', port: 6003 },
    ]);
    expect(t.readWrite).toBe(true);
    // What pg and MikroORM can parse: the first host, the other parameters kept, the password as written.
    expect(t.singleHostUrl).toBe('postgresql://app:s%40cret@db1:6001/tunnelgate?sslmode=disable');
    expect(needsLocator(t)).toBe(true);
  });

  it('leaves a plain one-host URL exactly as it was, with no locator', () => {
    const url = 'postgresql://postgres@127.0.0.1:5432/tg?application_name=x';
    const t = parseDatabaseUrl(url);
    expect(t).toEqual({ hosts: [{ host: '127.0.0.1', port: 5432 }], readWrite: false, singleHostUrl: url });
    expect(needsLocator(t)).toBe(false);
    expect(pgConfig(url)).toEqual({ connectionString: url });
  });

  it('gives pg a socket factory, and the rest of the settings, for several hosts', () => {
    const c = pgConfig('postgresql://u:p@h1:1,h2:2/db?target_session_attrs=primary');
    expect(typeof c.stream).toBe('function');
    expect(c).toMatchObject({ user: 'u', password: 'p', database: 'db', host: 'h1' });
  });

  it('refuses a session kind it cannot honour', () => {
    expect(() => parseDatabaseUrl('postgresql://h1,h2/db?target_session_attrs=standby')).toThrow(/target_session_attrs=standby/);
  });
});

describe('isDatabaseUnavailable', () => {
  const withCode = (code: string, message = 'x') => Object.assign(new Error(message), { code });
  it('is true for a server going away, at any depth of the driver wrappers', () => {
    expect(isDatabaseUnavailable(withCode('ECONNREFUSED'))).toBe(true);
    expect(isDatabaseUnavailable(withCode('57P01', 'terminating connection due to administrator command'))).toBe(true);
    expect(isDatabaseUnavailable(withCode('25006', 'cannot execute INSERT in a read-only transaction'))).toBe(true);
    expect(isDatabaseUnavailable(withCode('08006'))).toBe(true);
    expect(isDatabaseUnavailable(new Error('wrapped', { cause: new Error('Connection terminated unexpectedly') }))).toBe(true);
    expect(isDatabaseUnavailable(new Error('query failed', { cause: new NoPrimaryError('no read-write PostgreSQL among 2 host(s)') }))).toBe(true);
  });
  it('is false for bugs and refusals: those stay 500 or their own code', () => {
    expect(isDatabaseUnavailable(withCode('23505', 'duplicate key value violates unique constraint'))).toBe(false);
    expect(isDatabaseUnavailable(withCode('42P01', 'relation "x" does not exist'))).toBe(false);
    expect(isDatabaseUnavailable(new TypeError('undefined is not a function'))).toBe(false);
    expect(isDatabaseUnavailable(new ApiError('out_of_stock', 'none left'))).toBe(false);
    expect(isDatabaseUnavailable(null)).toBe(false);
  });
});
