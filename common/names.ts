// Name rules both programs share: UUIDs (ids of tunnels, nodes, users, job ids) and Linux interface names
// (a tunnel's GRE link). No I/O, no dependencies.

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const CANONICAL_UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A UUID in its 8-4-4-4-12 hex form, either case (what a client may type). */
export function isUuid(v: unknown): v is string {
  return typeof v === 'string' && UUID_RE.test(v);
}

/**
 * A UUID in lower case, the form PostgreSQL prints and the gateway issues: for values the gateway wrote
 * itself (token subjects, cursors), where another spelling means the value was not ours.
 */
export function isCanonicalUuid(v: unknown): v is string {
  return typeof v === 'string' && CANONICAL_UUID_RE.test(v);
}

/**
 * A tunnel's interface name: 1 to 15 bytes (Linux's IFNAMSIZ less the NUL), a letter or digit, then
 * letters, digits, `_` and `-`. Stricter than Linux (which forbids only '/', ':' and whitespace): the name
 * also becomes a sysctl key (a '.' would split it), a systemd unit name and a file name on the origin, and
 * must never need escaping in the origin script.
 */
export function isInterfaceName(v: unknown): v is string {
  return typeof v === 'string' && /^[A-Za-z0-9][A-Za-z0-9_-]{0,14}$/.test(v);
}

/** The interface-name rule in words, for error texts. */
export const INTERFACE_NAME_RULE = 'an interface name of 1 to 15 characters (a letter or digit, then letters, digits, _ and -)';
