// nftables over nfnetlink, pure (no I/O): one module per kernel object (table, chain, set and its elements, their dump,
// rule and its expressions, stateful object, generation), the batch that carries them in one transaction,
// and the shared framing. Attribute order, flags and userdata follow what nft 1.0.6 (libnftnl) sends, so
// test/unit/netlink compares our batches with strace captures of `nft -f` byte for byte.
export * from './message.ts';
export * from './table.ts';
export * from './chain.ts';
export * from './set.ts';
export * from './set-dump.ts';
export * from './expressions.ts';
export * from './rule.ts';
export * from './object.ts';
export * from './flowtable.ts';
export * from './generation.ts';
export * from './notification.ts';
export * from './batch.ts';
