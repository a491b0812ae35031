// What the tunnel page reads from a tunnel's status (docs/API.md "Tunnel lifecycle"): how far the three
// steps of bringing it up are (the tunnel API document's order: scripts on the origin, provision,
// activate), which actions it offers, how to read an answer to activate, and whether a saved change is on
// the edge yet. Pure: no DOM, no preact, no i18n runtime (test/unit/panel-tunnel.test.ts imports it).
import type { MessageKey } from '../../i18n/en.ts';
import { nameRefusal, originRefusal, settingsRefusal, type FieldRefusal, type SettingsField } from './protection.ts';

export type Status = 'PENDING' | 'PROVISIONING' | 'PROVISIONED' | 'ACTIVE' | 'FAILED' | 'DELETING' | 'DELETED';
export type StepState = 'done' | 'current' | 'waiting';

/**
 * The states of steps 1 (run the script on the origin), 2 (provision) and 3 (activate). Step 1 happens on
 * the buyer's server, out of the API's sight: it is done only once activation proved the origin answers
 * through the tunnel, and current before that (running the script again is safe). Steps 1 and 2 may be
 * done in either order; step 3 needs both.
 */
export function stepStates(status: Status): [StepState, StepState, StepState] {
  switch (status) {
    case 'PENDING':
    case 'PROVISIONING':
    case 'FAILED':
      return ['current', 'current', 'waiting'];
    case 'PROVISIONED':
      return ['current', 'done', 'current'];
    case 'ACTIVE':
      return ['done', 'done', 'done'];
    case 'DELETING':
    case 'DELETED':
      return ['waiting', 'waiting', 'waiting'];
  }
}

/** Provision applies to a pending tunnel, or again to a failed one; a provisioning one waits for its job. */
export const canProvision = (s: Status): boolean => s === 'PENDING' || s === 'FAILED';
export const canActivate = (s: Status): boolean => s === 'PROVISIONED';
/** Settings, origin and delete apply to any tunnel not on its way out (server/domain/tunnels/update.ts). */
export const isLive = (s: Status): boolean => s !== 'DELETING' && s !== 'DELETED';

export interface ActivateRefusal {
  kind: 'probe' | 'state' | 'edge' | 'other';
  key: MessageKey;
}

/**
 * A refusal of activateTunnel. invalid_state "did not answer through the tunnel" is the edge's probe
 * getting no answer back (server/domain/tunnels/lifecycle.ts): the page then says what to check on the
 * origin (docs/BUYER.md "When activate fails"). Another invalid_state is a tunnel not provisioned yet.
 */
export function activateRefusal(code: string, message: string): ActivateRefusal {
  if (code === 'invalid_state') return /did not answer/.test(message) ? { kind: 'probe', key: 'tunnel.activate.probeFailed' } : { kind: 'state', key: 'tunnel.activate.notProvisioned' };
  if (code === 'edge_unavailable') return { kind: 'edge', key: 'tunnel.edgeUnavailable' };
  return { kind: 'other', key: 'tunnel.failed' };
}

/** What a saved change was: the status before it, and what it changed. */
export interface SavedChange {
  statusBefore: Status;
  /** Ports, protocol, protection or origin changed: something the edge must apply. */
  specChanged: boolean;
  originMoved: boolean;
}

/**
 * Where a saved change is:
 * - saved: nothing for the edge (a name, or no change);
 * - stored: the tunnel is not on an edge (pending, failed): the next provision carries it;
 * - applied: the edge applied it;
 * - pending: not applied yet, and the live status will say when it is;
 * - sent: sent to the edge, and nothing the API answers tells whether it is applied yet;
 * - failed: the edge gave up (the tunnel is FAILED): provision again.
 *
 * GraphQL's updateTunnel answers the tunnel only, without REST's 200/202 (applied/retrying), and an
 * update moves no status, except two moves the live status shows: a new origin puts an ACTIVE tunnel back
 * to PROVISIONED once applied, and a change to a PROVISIONING tunnel rides its job to PROVISIONED.
 */
export function saveOutcome(change: SavedChange, statusNow: Status): 'saved' | 'stored' | 'applied' | 'pending' | 'sent' | 'failed' {
  if (!change.specChanged) return 'saved';
  const before = change.statusBefore;
  if (before === 'PENDING' || before === 'FAILED') return 'stored';
  if (statusNow === 'FAILED') return 'failed';
  if (before === 'PROVISIONING') return statusNow === 'PROVISIONING' ? 'pending' : 'applied';
  if (before === 'ACTIVE' && change.originMoved) return statusNow === 'ACTIVE' ? 'pending' : 'applied';
  return 'sent';
}

/** Keeps the newer of two views of one tunnel: a mutation's answer can arrive after a fresher live event. */
export function newer<T extends { updatedAt: string }>(held: T | undefined, incoming: T): T {
  if (!held) return incoming;
  return Date.parse(incoming.updatedAt) >= Date.parse(held.updatedAt) ? incoming : held;
}

export type UpdateField = 'name' | 'originIp' | 'form' | SettingsField;

/**
 * A refusal of updateTunnel at the field it concerns: the origin, the name or a setting as at purchase;
 * anything else (a tunnel deleted meanwhile: invalid_state; the edge unreachable) for the whole form.
 */
export function updateRefusal(code: string, message: string): FieldRefusal<UpdateField> {
  const refused = originRefusal(code, message) ?? (code === 'invalid_request' ? (nameRefusal(message) ?? settingsRefusal(message)) : null);
  if (refused) return refused;
  if (code === 'edge_unavailable') return { field: 'form', key: 'tunnel.edgeUnavailable' };
  if (code === 'network_error') return { field: 'form', key: 'tunnel.settings.network' };
  return { field: 'form', key: 'tunnel.failed', params: { message } };
}
