// The GraphQL explorer page: GraphiQL signed in as the user. GraphiQL and React live in a chunk of their
// own (graphiql.ts), loaded when this page opens, so the first page stays small.
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiFailure } from '../../../api/graphql.ts';
import { useT } from '../../../i18n/index.ts';
import { Failure, Loading, Page } from '../../../ui/components.tsx';
import { Link } from '../../../ui/Link.tsx';

export function Explorer() {
  const t = useT();
  const host = useRef<HTMLDivElement>(null);
  const [state, setState] = useState<'loading' | 'ready' | ApiFailure>('loading');
  const [attempt, setAttempt] = useState(0);
  useEffect(() => {
    let unmount: (() => void) | undefined;
    let live = true;
    import('./graphiql.ts')
      .then((m) => m.mount(host.current!))
      .then(
        (stop) => {
          if (!live) return stop();
          unmount = stop;
          setState('ready');
        },
        (err: unknown) => live && setState(new ApiFailure('network_error', err instanceof Error ? err.message : String(err))),
      );
    return () => {
      live = false;
      unmount?.();
    };
  }, [attempt]);
  return (
    <Page title={t('developers.graphql.title')}>
      <p class="muted">
        {t('developers.graphql.intro')} <Link href="/developers/api">{t('developers.apiLink')}</Link>
      </p>
      {state === 'loading' && <Loading />}
      {state instanceof ApiFailure && (
        <Failure
          failure={state}
          retry={() => {
            setState('loading');
            setAttempt((n) => n + 1);
          }}
        />
      )}
      <div ref={host} class="graphiql-host" key={attempt} role="region" aria-label={t('developers.graphql.region')} />
    </Page>
  );
}
