// The account page: who is signed in and the balance, the ledger of top-ups and purchases, and the
// account's webhooks.
import { useAccount } from '../../app/account.tsx';
import { usd } from '../../app/format.ts';
import { useT } from '../../i18n/index.ts';
import { Failure, Loading, Page } from '../../ui/components.tsx';
import { Ledger } from './Ledger.tsx';
import { Webhooks } from './Webhooks.tsx';

export function Account() {
  const t = useT();
  const me = useAccount();
  if (me.failure) return <Page title={t('account.title')}><Failure failure={me.failure} retry={me.reload} /></Page>;
  if (!me.data) return <Page title={t('account.title')}><Loading /></Page>;
  const { me: who } = me.data;
  return (
    <Page title={t('account.title')}>
      <dl class="facts">
        <div>
          <dt>{t('account.who')}</dt>
          <dd>{who.name ?? who.email ?? who.accountId}</dd>
        </div>
        <div>
          <dt>{t('account.role')}</dt>
          <dd>{who.permission === 'WRITE' ? t('account.role.write') : t('account.role.read')}</dd>
        </div>
        <div>
          <dt>{t('account.balance')}</dt>
          <dd data-testid="account-balance">{usd(who.balanceUsd)}</dd>
        </div>
      </dl>
      <Ledger />
      <Webhooks />
    </Page>
  );
}
