export declare const AGENT_NODE_FLAGS: readonly string[];
export declare const AGENT_LOADER: URL;
export declare function hasAgentFlags(execArgv?: readonly string[]): boolean;
