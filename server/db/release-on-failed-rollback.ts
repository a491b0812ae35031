// Works around a connection leak in kysely 0.29 (under MikroORM's PostgreSQL driver): a controlled
// transaction releases its pooled connection only after a *successful* ROLLBACK or COMMIT. When the
// connection itself died mid-transaction (PostgreSQL restarted, failover, a network cut), ROLLBACK fails
// and the pg client is never returned to the pool; after a few such transactions every request that
// needs a transaction waits forever. Releasing the connection when ROLLBACK fails hands the dead client
// back to pg's pool, which discards it (a client that is no longer queryable is not reused).
// Imported once, for its effect, by orm.ts.
import { PostgresDriver } from 'kysely';

const PATCHED = Symbol.for('tunnelgate.kysely.releaseOnFailedRollback');
type Proto = { rollbackTransaction(c: unknown): Promise<void>; releaseConnection(c: unknown): Promise<void>; [PATCHED]?: true };
const proto = PostgresDriver.prototype as unknown as Proto;

if (!proto[PATCHED]) {
  const rollback = proto.rollbackTransaction;
  proto.rollbackTransaction = async function (this: Proto, connection: unknown): Promise<void> {
    try {
      await rollback.call(this, connection);
    } catch (e) {
      await this.releaseConnection(connection);
      throw e;
    }
  };
  proto[PATCHED] = true;
}
