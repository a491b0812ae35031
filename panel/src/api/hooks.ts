// Preact hooks over api/graphql.ts: a query's state (loading, data, failure, reload), a mutation's
// (running, failure), and a subscription's latest result.
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import type { TypedDocumentString } from '../graphql/generated.ts';
import { ApiFailure, request, subscribe } from './graphql.ts';

export interface QueryState<R> {
  data: R | undefined;
  failure: ApiFailure | undefined;
  loading: boolean;
  reload: () => void;
  /** Replaces the data held (after a mutation answered the new state). */
  set: (data: R) => void;
}

export function useQuery<R, V>(document: TypedDocumentString<R, V>, variables?: V, skip = false): QueryState<R> {
  const [data, setData] = useState<R | undefined>(undefined);
  const [failure, setFailure] = useState<ApiFailure | undefined>(undefined);
  const [loading, setLoading] = useState(!skip);
  const [tick, setTick] = useState(0);
  const key = JSON.stringify(variables ?? {});
  useEffect(() => {
    if (skip) return;
    let live = true;
    setLoading(true);
    setFailure(undefined);
    request(document, variables).then(
      (d) => {
        if (!live) return;
        setData(d);
        setLoading(false);
      },
      (e: unknown) => {
        if (!live) return;
        setFailure(e instanceof ApiFailure ? e : new ApiFailure('server_error', String(e)));
        setLoading(false);
      },
    );
    return () => {
      live = false;
    };
    // The variables are compared by value (key), not by identity.
  }, [document, key, tick, skip]);
  const reload = useCallback(() => setTick((n) => n + 1), []);
  return { data, failure, loading, reload, set: setData };
}

export interface MutationState<R, V> {
  run: (variables: V) => Promise<R | undefined>;
  running: boolean;
  failure: ApiFailure | undefined;
  reset: () => void;
}

/** A mutation; `run` answers its data, or undefined after a refusal (then `failure` says which). */
export function useMutation<R, V>(document: TypedDocumentString<R, V>): MutationState<R, V> {
  const [running, setRunning] = useState(false);
  const [failure, setFailure] = useState<ApiFailure | undefined>(undefined);
  const inFlight = useRef(false);
  const run = useCallback(
    async (variables: V) => {
      // A second click while the first is in flight does nothing (and the purchase carries an idempotency key).
      if (inFlight.current) return undefined;
      inFlight.current = true;
      setRunning(true);
      setFailure(undefined);
      try {
        return await request(document, variables);
      } catch (e) {
        setFailure(e instanceof ApiFailure ? e : new ApiFailure('server_error', String(e)));
        return undefined;
      } finally {
        inFlight.current = false;
        setRunning(false);
      }
    },
    [document],
  );
  return { run, running, failure, reset: () => setFailure(undefined) };
}

/** Calls `onData` with every result of a live subscription while the component is mounted. */
export function useSubscription<R, V>(document: TypedDocumentString<R, V>, variables: V, onData: (data: R) => void, skip = false): ApiFailure | undefined {
  const [failure, setFailure] = useState<ApiFailure | undefined>(undefined);
  const handler = useRef(onData);
  handler.current = onData;
  const key = JSON.stringify(variables);
  useEffect(() => {
    if (skip) return;
    return subscribe(document, variables, (d) => handler.current(d), setFailure);
  }, [document, key, skip]);
  return failure;
}
