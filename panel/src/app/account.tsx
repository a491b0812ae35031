// The signed-in account (name, role, balance), shared by every page through a context: the shell
// shows who is signed in, and `useCanWrite` hides every write control from a read-only role.
import { createContext, type ComponentChildren } from 'preact';
import { useContext } from 'preact/hooks';
import { useQuery, type QueryState } from '../api/hooks.ts';
import { MeDocument, type MeQuery } from '../graphql/generated.ts';

const AccountContext = createContext<QueryState<MeQuery> | undefined>(undefined);

export function AccountProvider(props: { children: ComponentChildren }) {
  const me = useQuery(MeDocument);
  return <AccountContext.Provider value={me}>{props.children}</AccountContext.Provider>;
}

export function useAccount(): QueryState<MeQuery> {
  const me = useContext(AccountContext);
  if (!me) throw new Error('useAccount outside AccountProvider');
  return me;
}

/** Whether this credential may write (buy, provision, change, delete); a viewer may not. */
export function useCanWrite(): boolean {
  return useAccount().data?.me.permission === 'WRITE';
}
