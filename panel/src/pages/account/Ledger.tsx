// The ledger: every top-up and purchase of the account, newest first, with the tunnel a purchase bought
// and the promocode it used; more pages on demand.
import { useState } from 'preact/hooks';
import { ApiFailure, request } from '../../api/graphql.ts';
import { useQuery } from '../../api/hooks.ts';
import { usd } from '../../app/format.ts';
import { AccountLedgerDocument, type AccountLedgerQuery } from '../../graphql/generated.ts';
import { formatDateTime, useT } from '../../i18n/index.ts';
import { Failure, Loading } from '../../ui/components.tsx';
import { Link } from '../../ui/Link.tsx';

type Entry = AccountLedgerQuery['ledger']['entries'][number];
const PAGE = 25;

export function Ledger() {
  const t = useT();
  const q = useQuery(AccountLedgerDocument, { limit: PAGE });
  const [more, setMore] = useState<{ rows: Entry[]; cursor: string | null | undefined }>({ rows: [], cursor: undefined });
  const [loadingMore, setLoadingMore] = useState(false);
  const [moreFailure, setMoreFailure] = useState<ApiFailure | undefined>(undefined);
  const rows = [...(q.data?.ledger.entries ?? []), ...more.rows];
  const cursor = more.cursor === undefined ? q.data?.ledger.nextCursor : more.cursor;

  const loadMore = async () => {
    if (!cursor) return;
    setLoadingMore(true);
    setMoreFailure(undefined);
    try {
      const page = await request(AccountLedgerDocument, { cursor, limit: PAGE });
      setMore({ rows: [...more.rows, ...page.ledger.entries], cursor: page.ledger.nextCursor ?? null });
    } catch (e) {
      setMoreFailure(e instanceof ApiFailure ? e : new ApiFailure('server_error', String(e)));
    } finally {
      setLoadingMore(false);
    }
  };

  return (
    <section aria-labelledby="ledger-title">
      <h2 id="ledger-title">{t('account.ledger.title')}</h2>
      {q.failure ? (
        <Failure failure={q.failure} retry={q.reload} />
      ) : !q.data ? (
        <Loading />
      ) : rows.length === 0 ? (
        <p>{t('account.ledger.empty')}</p>
      ) : (
        <div class="table-wrap">
          <table class="ledger" aria-labelledby="ledger-title">
            <thead>
              <tr>
                <th scope="col">{t('account.ledger.col.date')}</th>
                <th scope="col">{t('account.ledger.col.what')}</th>
                <th scope="col" class="num">
                  {t('account.ledger.col.amount')}
                </th>
                <th scope="col" class="num wide">
                  {t('account.ledger.col.balance')}
                </th>
              </tr>
            </thead>
            <tbody>
              {rows.map((e) => (
                <tr key={e.id} data-ledger-id={e.id}>
                  <td>{formatDateTime(e.createdAt)}</td>
                  <td>
                    {e.kind === 'TOPUP' ? t('account.ledger.topup') : t('account.ledger.purchase')}
                    {e.tunnel && (
                      <>
                        {': '}
                        <Link href={`/tunnels/${e.tunnel.id}`}>{e.tunnel.name ?? t('account.ledger.unnamed')}</Link>
                      </>
                    )}
                    {e.promocode && (
                      <span class="muted">
                        {' '}
                        {t('account.ledger.promocode', { code: e.promocode })}
                      </span>
                    )}
                  </td>
                  <td class={`num${e.amountUsd > 0 ? ' amount-in' : ''}`}>{e.amountUsd > 0 ? `+${usd(e.amountUsd)}` : `−${usd(-e.amountUsd)}`}</td>
                  <td class="num wide">{usd(e.balanceAfter)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {moreFailure && <Failure failure={moreFailure} retry={loadMore} />}
      {cursor && (
        <button type="button" onClick={loadMore} disabled={loadingMore}>
          {loadingMore ? t('common.loading') : t('account.ledger.more')}
        </button>
      )}
    </section>
  );
}
