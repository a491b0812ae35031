// GraphiQL, mounted into the explorer page (Explorer.tsx) in this chunk of its own with React: the panel
// itself is Preact, and GraphiQL is the explorer the community knows.
//
// Why GraphiQL 4 (CodeMirror 5) and not 5: GraphiQL 5 edits with Monaco, which adds <style> elements at
// run time and runs its language services in web workers; the panel's Content-Security-Policy allows
// styles from files of its own origin only (`style-src 'self'`, no 'unsafe-inline'), so Monaco's styles
// would be refused. CodeMirror 5 styles itself from the stylesheet the build emits (build.mjs, linked by
// `mount` below) and through the CSSOM (`element.style`), which the policy allows; nothing in this chunk
// evaluates strings as code.
import { GraphiQL } from 'graphiql';
import { createClient, type Client, type ExecutionResult } from 'graphql-ws';
import { createElement, type ComponentProps } from 'react';
import { createRoot } from 'react-dom/client';
import stylesheet from 'asset:graphiql.css';
import { accessToken } from '../../../auth/session.ts';
import { isSubscription, withAuthorization } from './fetch.ts';

type Fetcher = ComponentProps<typeof GraphiQL>['fetcher'];
type FetcherParams = Parameters<Fetcher>[0];
type FetcherOpts = Parameters<Fetcher>[1];

/** What the editor opens with the first time (GraphiQL remembers the user's own tabs afterwards). */
const DEFAULT_QUERY = `# Runs as you, on your account. Ctrl-Enter runs, Ctrl-Space completes.
query Me {
  me {
    accountId
    name
    role
    permission
    balanceUsd
  }
}
`;

/** Links GraphiQL's stylesheet once, and waits for it, so the editor never shows unstyled. */
function loadStylesheet(): Promise<void> {
  const existing = document.querySelector<HTMLLinkElement>(`link[data-graphiql]`);
  if (existing) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const link = document.createElement('link');
    link.rel = 'stylesheet';
    link.href = stylesheet;
    link.dataset.graphiql = '';
    link.onload = () => resolve();
    link.onerror = () => reject(new Error(`GraphiQL's stylesheet did not load (${stylesheet})`));
    document.head.append(link);
  });
}

let ws: Client | undefined;
const socket = () =>
  (ws ??= createClient({
    url: new URL('/graphql', location.href.replace(/^http/, 'ws')).href,
    lazy: true,
    connectionParams: async () => ({ Authorization: `Bearer ${await accessToken()}` }),
  }));

async function post(params: FetcherParams, opts: FetcherOpts | undefined): Promise<ExecutionResult> {
  const send = async (token: string) =>
    fetch('/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json', ...withAuthorization(opts?.headers, token) },
      body: JSON.stringify(params),
    });
  let response = await send(await accessToken());
  // An access token refused mid-session is refreshed once, as the rest of the panel does (api/graphql.ts).
  if (response.status === 401) response = await send(await accessToken(true));
  return (await response.json()) as ExecutionResult;
}

// GraphiQL's fetcher type names graphql's ExecutionResult, whose errors are GraphQLError objects; over
// the wire every error is the plain formatted JSON, which is all GraphiQL reads (it prints them).
type FetcherResult = ReturnType<Fetcher>;

const fetcher: Fetcher = (params, opts) =>
  (isSubscription(params.operationName, opts?.documentAST)
    ? socket().iterate({ query: params.query, operationName: params.operationName, variables: params.variables as Record<string, unknown> })
    : post(params, opts)) as unknown as FetcherResult;

/** Mounts GraphiQL into `host`; answers the function that unmounts it. */
export async function mount(host: HTMLElement): Promise<() => void> {
  await loadStylesheet();
  const root = createRoot(host);
  root.render(createElement(GraphiQL, { fetcher, defaultQuery: DEFAULT_QUERY, shouldPersistHeaders: false }));
  const observer = new MutationObserver(() => completeAccessibility(host));
  observer.observe(host, { childList: true, subtree: true });
  return () => {
    observer.disconnect();
    root.unmount();
  };
}

/**
 * What GraphiQL 4 leaves out for screen readers and the keyboard (docs/PANEL.md: every control named, all
 * of it reachable by keyboard), added to its editors as React renders them: CodeMirror's input textarea is
 * named after the editor's section (GraphiQL's own English aria-label: "Query Editor", "Result Window",
 * "Variables", "Headers"), and its scroller takes focus so a long document scrolls by keyboard.
 */
function completeAccessibility(host: HTMLElement): void {
  for (const input of host.querySelectorAll<HTMLTextAreaElement>('.CodeMirror textarea:not([aria-label])')) {
    const name = input.closest('[aria-label]')?.getAttribute('aria-label');
    if (name) input.setAttribute('aria-label', name);
  }
  // CodeMirror gives its scroller tabindex -1 (focusable by script only).
  for (const scroller of host.querySelectorAll<HTMLElement>('.CodeMirror-scroll:not([tabindex="0"])')) scroller.tabIndex = 0;
}
