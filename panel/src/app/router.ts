// A small router over the History API: the gateway answers every unknown path with index.html, so a deep
// link (a tunnel's page, a portal page) opens here and this module picks the page. Routes are patterns
// with `:name` segments, matched in order.
import { useEffect, useState } from 'preact/hooks';

/** What a page is given by the route that matched it: the values of its `:name` segments (app/routes.tsx). */
export interface RouteProps {
  params: Record<string, string>;
}

export interface Match {
  route: string;
  params: Record<string, string>;
}

const listeners = new Set<() => void>();
const notify = () => {
  for (const l of listeners) l();
};
window.addEventListener('popstate', notify);

/** Goes to `path` (with its query) inside the app; `replace` leaves no history entry. */
export function navigate(path: string, replace = false): void {
  if (path === location.pathname + location.search) return;
  if (replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  window.scrollTo(0, 0);
  notify();
}

export function match(routes: readonly string[], path: string): Match | null {
  const parts = path.split('/').filter(Boolean);
  for (const route of routes) {
    const want = route.split('/').filter(Boolean);
    if (want.length !== parts.length) continue;
    const params: Record<string, string> = {};
    let ok = true;
    for (let i = 0; i < want.length && ok; i++) {
      const w = want[i]!;
      const p = parts[i]!;
      if (w.startsWith(':')) {
        try {
          params[w.slice(1)] = decodeURIComponent(p);
        } catch {
          ok = false;
        }
      } else ok = w === p;
    }
    if (ok) return { route, params };
  }
  return null;
}

/** The current path, re-rendering the caller when it changes. */
export function useLocation(): { path: string; query: URLSearchParams } {
  const [, setTick] = useState(0);
  useEffect(() => {
    const l = () => setTick((n) => n + 1);
    listeners.add(l);
    return () => void listeners.delete(l);
  }, []);
  return { path: location.pathname, query: new URLSearchParams(location.search) };
}

/** A click on an in-app link navigates without a page load (modifier keys keep the browser's meaning). */
export function onLinkClick(e: MouseEvent, href: string): void {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  navigate(href);
}
