// The shell: sign-in first (auth/session.ts), then the navigation, the language switch and the page the
// path names (app/routes.tsx).
import { useEffect, useState } from 'preact/hooks';
import { CALLBACK_PATH, SIGNED_OUT_PATH, SignInError, accessToken, completeSignIn, signIn, signOut, signedIn } from '../auth/session.ts';
import { LOCALE_NAMES, locale, setLocale, useT, type Locale } from '../i18n/index.ts';
import { Link } from '../ui/Link.tsx';
import { AccountProvider, useAccount } from './account.tsx';
import { match, navigate, useLocation } from './router.ts';
import { ROUTES } from './routes.tsx';

type Phase = { kind: 'signing-in' } | { kind: 'ready' } | { kind: 'failed'; reason: string } | { kind: 'signed-out' };

export function App() {
  const t = useT();
  const [phase, setPhase] = useState<Phase>({ kind: signedIn() ? 'ready' : 'signing-in' });
  useEffect(() => {
    if (phase.kind !== 'signing-in') return;
    (async () => {
      if (location.pathname === SIGNED_OUT_PATH) return setPhase({ kind: 'signed-out' });
      if (location.pathname === CALLBACK_PATH) {
        const back = await completeSignIn();
        navigate(back, true);
      } else {
        await accessToken();
      }
      setPhase({ kind: 'ready' });
    })().catch((err: unknown) => setPhase({ kind: 'failed', reason: err instanceof SignInError || err instanceof Error ? err.message : String(err) }));
  }, [phase.kind]);

  if (phase.kind === 'signed-out')
    return (
      <main id="main" class="center">
        <p>{t('auth.signedOut')}</p>
        <button type="button" class="primary" onClick={() => void signIn('/', false)}>
          {t('auth.signInAgain')}
        </button>
      </main>
    );
  if (phase.kind === 'failed')
    return (
      <main id="main" class="center">
        <p role="alert">{t('auth.failed', { reason: phase.reason })}</p>
        <button type="button" onClick={() => void signIn('/', false)}>
          {t('auth.retry')}
        </button>
      </main>
    );
  if (phase.kind === 'signing-in')
    return (
      <main id="main" class="center">
        <p role="status">{t('auth.signingIn')}</p>
      </main>
    );
  return (
    <AccountProvider>
      <Shell />
    </AccountProvider>
  );
}

function Shell() {
  const t = useT();
  const { path } = useLocation();
  const me = useAccount();
  const found = match(Object.keys(ROUTES), path);
  const Page = found ? ROUTES[found.route]! : null;
  const section = (prefix: string) => (prefix === '/' ? path === '/' || path.startsWith('/tunnels') : path.startsWith(prefix));
  return (
    <>
      <a class="skip" href="#main">
        {t('app.skip')}
      </a>
      <header class="top">
        <Link href="/" class="brand">
          {t('app.name')}
        </Link>
        <nav aria-label={t('nav.label')}>
          <ul>
            {(
              [
                ['/', 'nav.dashboard'],
                ['/buy', 'nav.buy'],
                ['/account', 'nav.account'],
                ['/developers', 'nav.developers'],
              ] as const
            )
              // A read-only role cannot buy: the buy page is not offered to it.
              .filter(([href]) => href !== '/buy' || me.data?.me.permission === 'WRITE')
              .map(([href, key]) => (
              <li key={href}>
                <Link href={href} aria-current={section(href) ? 'page' : undefined}>
                  {t(key)}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        <div class="who">
          {me.data && (
            <span class="muted">
              {t('nav.signedInAs', { name: me.data.me.name ?? me.data.me.email ?? me.data.me.accountId })}
              {me.data.me.permission === 'READ' && ` (${t('nav.viewer')})`}
            </span>
          )}
          <label class="lang">
            <span class="visually-hidden">{t('nav.language')}</span>
            <select aria-label={t('nav.language')} value={locale()} onChange={(e) => setLocale(e.currentTarget.value as Locale)}>
              {(Object.keys(LOCALE_NAMES) as Locale[]).map((l) => (
                <option key={l} value={l} lang={l}>
                  {LOCALE_NAMES[l]}
                </option>
              ))}
            </select>
          </label>
          <button type="button" onClick={() => void signOut()}>
            {t('nav.signOut')}
          </button>
        </div>
      </header>
      <main id="main">{Page ? <Page params={found!.params} /> : <p>{t('common.notFound')}</p>}</main>
    </>
  );
}
