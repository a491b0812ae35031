// What reached a namespace, read from nftables in that namespace, and the by-hand rule deletion that proves
// a rule of the agent's table (the proof that each rule does its job). Shared by the host's proofs on veth stand-ins
// (test/netns/edge-protection.test.ts) and the VM's on real GRE (test/vm/protection.test.ts): each runs the
// `nft` commands its own way (a namespace on this host, or the guest's control server), so this module only
// writes the rulesets and reads the answers.

/** The table the observers live in, apart from the agent's. */
export const OBS_TABLE = 'obs';

/**
 * An `obs` table with one named counter per rule (`n_<label>`: a bare label may be an nft keyword such as
 * icmp or frag) and two timeout sets, `first` and `last`, for the kernel-timestamp method (firstLastSeconds).
 * priority: 10 by default (after the filter chains, so it counts what they let through); -300 in prerouting
 * counts what arrives before anything else of the namespace sees it.
 */
export function observeRuleset(hook: 'input' | 'forward' | 'prerouting', rules: Record<string, string>, priority = 10): string {
  const counters = Object.keys(rules)
    .map((n) => `  counter n_${n} {}\n`)
    .join('');
  const body = Object.entries(rules)
    .map(([n, m]) => `    ${m} counter name "n_${n}"\n`)
    .join('');
  // `}` on lines of their own: nft 1.0.6 (Debian 12, the VM) refuses some one-line forms.
  return `table ip ${OBS_TABLE} {\n${counters}  set first {\n    type ipv4_addr; flags timeout; timeout 1h;\n  }\n  set last {\n    type ipv4_addr; flags timeout; timeout 1h;\n  }\n  chain c {\n    type filter hook ${hook} priority ${priority}; policy accept;\n${body}  }\n}\n`;
}

/** argv of the listing counterPackets reads. */
export const counterArgv = (name: string): [string, ...string[]] => ['nft', '-j', 'list', 'counter', 'ip', OBS_TABLE, `n_${name}`];

/** Packets of the counter in `nft -j list counter` output. */
export function counterPackets(json: string): number {
  const j = JSON.parse(json) as { nftables: { counter?: { packets: number } }[] };
  return j.nftables.find((o) => o.counter)!.counter!.packets;
}

/** Milliseconds left until a set element's timeout: "expires 59m58s40ms". */
export function expiresMs(text: string, set: string): number {
  const m = new RegExp(`set ${set} \\{[^}]*expires ((?:\\d+h)?(?:\\d+m)?(?:\\d+s)?(?:\\d+ms)?)`).exec(text);
  if (!m) throw new Error(`no element in set ${set}`);
  let ms = 0;
  for (const [, v, u] of m[1]!.matchAll(/(\d+)(h|ms|m|s)/g)) ms += Number(v) * { h: 3_600_000, m: 60_000, s: 1000, ms: 1 }[u as 'h' | 'm' | 's' | 'ms'];
  return ms;
}

/**
 * Seconds between the first and the last packet a rule with `add @first { ip saddr } update @last { ip saddr }`
 * saw, from the kernel's own timestamps (both timeouts read in one listing of the obs table): no wall clock of
 * the test's, so a slow or loaded host only changes the figures, not the method.
 */
export const firstLastSeconds = (obsListing: string): number => (expiresMs(obsListing, 'last') - expiresMs(obsListing, 'first')) / 1000;

/**
 * The handle of the ONE rule of an `nft -a list chain` listing whose text contains `text` (with `exact`, whose whole
 * text is `text`: a rule that is a part of another's, such as a chain's last `counter ... drop`).
 */
export function ruleHandle(chainListing: string, text: string, exact = false): string {
  const body = (l: string): string => l.replace(/# handle \d+/, '').trim();
  const lines = chainListing.split('\n').filter((l) => l.includes('# handle') && (exact ? body(l) === text : l.includes(text)));
  if (lines.length !== 1) throw new Error(`expected one rule with "${text}", found ${lines.length}:\n${chainListing}`);
  return /# handle (\d+)/.exec(lines[0]!)![1]!;
}
