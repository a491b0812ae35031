// Every page of the panel, by path. Pages add themselves here; the shell picks the first that matches.
import type { JSX } from 'preact';
import { Dashboard } from '../pages/dashboard/Dashboard.tsx';

export interface RouteProps {
  params: Record<string, string>;
}

export const ROUTES: Record<string, (props: RouteProps) => JSX.Element> = {
  '/': () => <Dashboard />,
};
