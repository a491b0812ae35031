// A page whose code is loaded when it is first opened (a dynamic import, its own chunk), so the first
// page of the panel stays within its budget (docs/PANEL.md "Building").
import type { JSX } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { ApiFailure } from '../../api/graphql.ts';
import { Failure, Loading } from '../../ui/components.tsx';

type Component<P> = (props: P) => JSX.Element;

export function lazyPage<P extends object>(load: () => Promise<Component<P>>): Component<P> {
  let loaded: Component<P> | undefined;
  return function LazyPage(props: P) {
    const [page, setPage] = useState<{ C: Component<P> } | undefined>(loaded && { C: loaded });
    const [failure, setFailure] = useState<ApiFailure | undefined>(undefined);
    const [attempt, setAttempt] = useState(0);
    useEffect(() => {
      if (page) return;
      let live = true;
      load().then(
        (C) => {
          loaded = C;
          if (live) setPage({ C });
        },
        // A chunk that fails to load (a deploy replaced it, the network dropped) can be tried again.
        (err: unknown) => live && setFailure(new ApiFailure('network_error', err instanceof Error ? err.message : String(err))),
      );
      return () => {
        live = false;
      };
    }, [attempt]);
    if (page) return <page.C {...props} />;
    if (failure)
      return (
        <Failure
          failure={failure}
          retry={() => {
            setFailure(undefined);
            setAttempt((n) => n + 1);
          }}
        />
      );
    return <Loading />;
  };
}
