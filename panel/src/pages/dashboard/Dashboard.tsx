// The dashboard: balance, the price of a tunnel at today's rate, stock, and every tunnel with its status
// and health as badges that change live (no reload, no polling), paged past 100 tunnels.
import { useState } from 'preact/hooks';
import { request } from '../../api/graphql.ts';
import { useQuery } from '../../api/hooks.ts';
import { useAccount, useCanWrite } from '../../app/account.tsx';
import { rub, usd } from '../../app/format.ts';
import { useLiveTunnels } from '../../app/live.ts';
import { DashboardDocument, TunnelsPageDocument, type TunnelRowFragment } from '../../graphql/generated.ts';
import { formatNumber, useT } from '../../i18n/index.ts';
import { Badge, Failure, Loading, Page } from '../../ui/components.tsx';
import { Link } from '../../ui/Link.tsx';

const PAGE = 50;

export function Dashboard() {
  const t = useT();
  const me = useAccount();
  const canWrite = useCanWrite();
  const q = useQuery(DashboardDocument, { limit: PAGE });
  const [more, setMore] = useState<{ rows: TunnelRowFragment[]; cursor: string | null | undefined }>({ rows: [], cursor: undefined });
  const [loadingMore, setLoadingMore] = useState(false);
  const rows = [...(q.data?.tunnels.tunnels ?? []), ...more.rows];
  const cursor = more.cursor === undefined ? q.data?.tunnels.nextCursor : more.cursor;
  const live = useLiveTunnels(rows.map((r) => r.id));

  if (q.failure) return <Page title={t('dashboard.title')}><Failure failure={q.failure} retry={q.reload} /></Page>;
  if (!q.data || !me.data) return <Page title={t('dashboard.title')}><Loading /></Page>;
  const { pricing } = q.data;

  const loadMore = async () => {
    if (!cursor) return;
    setLoadingMore(true);
    try {
      const page = await request(TunnelsPageDocument, { cursor, limit: PAGE });
      setMore({ rows: [...more.rows, ...page.tunnels.tunnels], cursor: page.tunnels.nextCursor ?? null });
    } finally {
      setLoadingMore(false);
    }
  };

  return (
    <Page title={t('dashboard.title')}>
      <div class="cards">
        <div class="card" aria-labelledby="balance-label">
          <h2 id="balance-label">{t('dashboard.balance')}</h2>
          <p class="big" data-testid="balance">{usd(me.data.me.balanceUsd)}</p>
          <p class="muted">{t('dashboard.price', { rub: rub(pricing.price), usd: usd(pricing.priceUsd), rate: formatNumber(pricing.usdRubRate) })}</p>
        </div>
        <div class="card">
          <h2>{t('dashboard.stock', { available: pricing.availability.available, total: pricing.availability.total })}</h2>
          {!pricing.availability.inStock && <p class="warning">{t('dashboard.outOfStock')}</p>}
          {canWrite && pricing.availability.inStock && (
            <p>
              <Link href="/buy" class="button primary">
                {t('nav.buy')}
              </Link>
            </p>
          )}
        </div>
      </div>
      <h2>{t('dashboard.tunnels')}</h2>
      {rows.length === 0 ? (
        <p>
          {t('dashboard.empty')}{' '}
          {canWrite && <Link href="/buy">{t('dashboard.buyFirst')}</Link>}
        </p>
      ) : (
        <div class="table-wrap">
          <table class="tunnels">
            <thead>
              <tr>
                <th scope="col">{t('dashboard.col.name')}</th>
                <th scope="col">{t('dashboard.col.ip')}</th>
                <th scope="col" class="wide">{t('dashboard.col.origin')}</th>
                <th scope="col">{t('dashboard.col.status')}</th>
                <th scope="col">{t('dashboard.col.health')}</th>
              </tr>
            </thead>
            <tbody>
              {rows.map((row) => {
                const now = live.get(row.id) ?? row;
                return (
                  <tr key={row.id} data-tunnel-id={row.id}>
                    <td>
                      <Link href={`/tunnels/${row.id}`}>{row.name ?? t('dashboard.unnamed')}</Link>
                    </td>
                    <td class="mono">{row.protectedIp}</td>
                    <td class="mono wide">{row.originIp}</td>
                    <td>
                      <Badge kind="status" value={now.status} />
                    </td>
                    <td>
                      <Badge kind="health" value={now.health} />
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      {cursor && (
        <button type="button" onClick={loadMore} disabled={loadingMore}>
          {loadingMore ? t('common.loading') : t('dashboard.loadMore')}
        </button>
      )}
    </Page>
  );
}
