// Every page of the panel, by path. Pages add themselves here; the shell picks the first that matches.
import type { JSX } from 'preact';
import { Account } from '../pages/account/Account.tsx';
import { Buy } from '../pages/buy/Buy.tsx';
import { Dashboard } from '../pages/dashboard/Dashboard.tsx';
import { Developers } from '../pages/developers/Developers.tsx';
import { ApplicationPage } from '../pages/developers/apps/Application.tsx';
import { ApplicationsPage } from '../pages/developers/apps/Applications.tsx';
import { Explorer } from '../pages/developers/graphql/Explorer.tsx';
import { lazyPage } from '../pages/developers/lazy.tsx';
import { TunnelPage } from '../pages/tunnel/Tunnel.tsx';
import type { RouteProps } from './router.ts';

export const ROUTES: Record<string, (props: RouteProps) => JSX.Element> = {
  '/': () => <Dashboard />,
  '/account': () => <Account />,
  '/developers': () => <Developers />,
  '/developers/api': lazyPage(() => import('../pages/developers/api/ApiReference.tsx').then((m) => m.ApiReference)),
  '/developers/graphql': () => <Explorer />,
  '/developers/apps': () => <ApplicationsPage />,
  '/developers/apps/:id': ({ params }) => <ApplicationPage key={params.id} id={params.id!} />,
  '/buy': () => <Buy />,
  '/tunnels/:id': (props) => <TunnelPage key={props.params.id} {...props} />,
};
