// Every page of the panel, by path. Pages add themselves here; the shell picks the first that matches.
import type { JSX } from 'preact';
import { Dashboard } from '../pages/dashboard/Dashboard.tsx';
import { Buy } from '../pages/buy/Buy.tsx';
import { TunnelPage } from '../pages/tunnel/Tunnel.tsx';

export interface RouteProps {
  params: Record<string, string>;
}

export const ROUTES: Record<string, (props: RouteProps) => JSX.Element> = {
  '/': () => <Dashboard />,
  '/buy': () => <Buy />,
  '/tunnels/:id': (props) => <TunnelPage key={props.params.id} {...props} />,
};
