// A tunnel's health history (docs/CONTRACTS.md "Health and traffic"): one row per change of `health`,
// written by the collection round in the transaction that changes it (server/health/ingest.ts), read
// by GET /api/dedicated/{id}/health-changes and GraphQL `Tunnel.healthChanges` (server/health/history.ts).
// It lives in the `traffic` schema beside the points it is drawn over, outside the ORM's view like them.
//   at        when the change happened: the agent's check that saw it, or the round that found the
//             node silent or the tunnel missing ('unknown')
//   seq       the order of writing, for changes at the same instant
// Kept 90 days like the hourly points. Unlike the points it is a plain table trimmed row by row
// (server/health/storage.ts maintain): changes are rare (a tunnel changes health a few times a day
// at most, the points a row a minute), and a change's `at` comes from the agent's clock, so a
// partition per month would have to exist for a time the gateway does not choose.
// No foreign key, as for the points: a deleted tunnel's history stays readable until it ages out.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261128220000_tunnel_health_change extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create table traffic.tunnel_health_change (seq bigint generated always as identity primary key, tunnel_id uuid not null, at timestamptz not null,
        previous text not null check (previous in ('up', 'down', 'unknown')), health text not null check (health in ('up', 'down', 'unknown')));`,
    );
    // A tunnel's range, oldest first: the read path. The trim runs with every collection round's upkeep
    // and deletes the few rows that just aged out: by `at` alone, never a scan of the table.
    this.addSql(`create index tunnel_health_change_tunnel_at on traffic.tunnel_health_change (tunnel_id, at, seq);`);
    this.addSql(`create index tunnel_health_change_at on traffic.tunnel_health_change (at);`);
  }
}
