export declare const AGENT_NODE_FLAGS: readonly string[];
export declare const AGENT_LOADER: URL;
export declare const REPO_ROOT: string;
export declare const BUNDLE_DIR: string;
export declare const BUNDLE: string;
export declare const BUNDLE_MANIFEST: string;
export declare function hasAgentFlags(execArgv?: readonly string[]): boolean;
export declare function digestOf(pathOrBytes: string | Uint8Array): string;
export declare function bundleStaleness(paths?: { manifestPath?: string; bundlePath?: string; root?: string }): string | null;
/** agent/main.ts's exports, from the bundle (or the sources when it cannot be built). */
export declare function loadAgent(opts?: { warn?: (message: string) => void; allowRebuild?: boolean }): Promise<typeof import('../main.ts')>;
