// Every migration, in order. Listed explicitly so the runner needs no file-system discovery
// (the same list works from TypeScript sources and from a build).
import { Migration20261121000000_initial } from './Migration20261121000000_initial.ts';
import { Migration20261121010000_clients_secrets } from './Migration20261121010000_clients_secrets.ts';
import { Migration20261121020000_oidc_payload } from './Migration20261121020000_oidc_payload.ts';
import { Migration20261125010000_nodes } from './Migration20261125010000_nodes.ts';
import { Migration20261125020000_identity } from './Migration20261125020000_identity.ts';
import { Migration20261125030000_http } from './Migration20261125030000_http.ts';
import { Migration20261125160000_gre_keys } from './Migration20261125160000_gre_keys.ts';
import { Migration20261125170000_tunnel_settings } from './Migration20261125170000_tunnel_settings.ts';
import { Migration20261126110000_webhooks } from './Migration20261126110000_webhooks.ts';
import { Migration20261127100000_health_traffic } from './Migration20261127100000_health_traffic.ts';
import { Migration20261128100000_health_checked_seen } from './Migration20261128100000_health_checked_seen.ts';
import { Migration20261128200000_node_tunnel_links } from './Migration20261128200000_node_tunnel_links.ts';
import { Migration20261128210000_node_poll_stuck } from './Migration20261128210000_node_poll_stuck.ts';
import { Migration20261128220000_tunnel_health_change } from './Migration20261128220000_tunnel_health_change.ts';
import { Migration20261128230000_client_owner_public } from './Migration20261128230000_client_owner_public.ts';
import { Migration20261129100000_webhook_fairness } from './Migration20261129100000_webhook_fairness.ts';
import { Migration20261129110000_tunnel_origin_change } from './Migration20261129110000_tunnel_origin_change.ts';
import { Migration20261129120000_webhook_creator } from './Migration20261129120000_webhook_creator.ts';
import { Migration20261129130000_attacks } from './Migration20261129130000_attacks.ts';
import { Migration20261129140000_status_cursor } from './Migration20261129140000_status_cursor.ts';

export const migrationsList = [
  { name: 'Migration20261121000000_initial', class: Migration20261121000000_initial },
  { name: 'Migration20261121010000_clients_secrets', class: Migration20261121010000_clients_secrets },
  { name: 'Migration20261121020000_oidc_payload', class: Migration20261121020000_oidc_payload },
  { name: 'Migration20261125010000_nodes', class: Migration20261125010000_nodes },
  { name: 'Migration20261125020000_identity', class: Migration20261125020000_identity },
  { name: 'Migration20261125030000_http', class: Migration20261125030000_http },
  { name: 'Migration20261125160000_gre_keys', class: Migration20261125160000_gre_keys },
  { name: 'Migration20261125170000_tunnel_settings', class: Migration20261125170000_tunnel_settings },
  { name: 'Migration20261126110000_webhooks', class: Migration20261126110000_webhooks },
  { name: 'Migration20261127100000_health_traffic', class: Migration20261127100000_health_traffic },
  { name: 'Migration20261128100000_health_checked_seen', class: Migration20261128100000_health_checked_seen },
  { name: 'Migration20261128200000_node_tunnel_links', class: Migration20261128200000_node_tunnel_links },
  { name: 'Migration20261128210000_node_poll_stuck', class: Migration20261128210000_node_poll_stuck },
  { name: 'Migration20261128220000_tunnel_health_change', class: Migration20261128220000_tunnel_health_change },
  { name: 'Migration20261128230000_client_owner_public', class: Migration20261128230000_client_owner_public },
  // webhook_fairness and webhook_creator both add disabled_at and disabled_reason, with `if not exists`
  // (they were written side by side), so the second finds the columns and adds only its own.
  { name: 'Migration20261129100000_webhook_fairness', class: Migration20261129100000_webhook_fairness },
  { name: 'Migration20261129110000_tunnel_origin_change', class: Migration20261129110000_tunnel_origin_change },
  { name: 'Migration20261129120000_webhook_creator', class: Migration20261129120000_webhook_creator },
  { name: 'Migration20261129130000_attacks', class: Migration20261129130000_attacks },
  { name: 'Migration20261129140000_status_cursor', class: Migration20261129140000_status_cursor },
];
