// rtnetlink encoders and decoders: links (GRE, veth), addresses, routes in numbered tables, policy rules.
// Pure: every encoder returns the bytes of one request message for a given seq; no I/O here.
// Attribute order and defaults follow what iproute2 6.1 sends for the same command, so our requests are
// byte-for-byte the ones the kernel already sees from `ip` (test/unit/netlink checks it against strace).
// One module per kernel object (link, address, route, rule) over the shared framing (message.ts), as nftables/ is.
export * from './message.ts';
export * from './link.ts';
export * from './address.ts';
export * from './route.ts';
export * from './rule.ts';
