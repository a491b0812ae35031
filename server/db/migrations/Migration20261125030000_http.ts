// Idempotency records expire after 7 days (they must not grow without bound): an index on their age for the purge.
// Generated from server/db/entities.ts.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261125030000_http extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create index "idempotency_record_created_idx" on "idempotency_record" ("created_at");`);
  }
}
