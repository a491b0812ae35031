// The developer portal's landing: the two API references and the account's OAuth applications.
import { useT } from '../../i18n/index.ts';
import { Page } from '../../ui/components.tsx';
import { Link } from '../../ui/Link.tsx';
import { Applications } from './apps/Applications.tsx';

export function Developers() {
  const t = useT();
  return (
    <Page title={t('developers.title')}>
      <p>{t('developers.intro')}</p>
      <div class="cards">
        <div class="card">
          <h2>
            <Link href="/developers/api">{t('developers.apiLink')}</Link>
          </h2>
          <p>{t('developers.apiAbout')}</p>
        </div>
        <div class="card">
          <h2>
            <Link href="/developers/graphql">{t('developers.graphqlLink')}</Link>
          </h2>
          <p>{t('developers.graphqlAbout')}</p>
        </div>
      </div>
      <section aria-labelledby="apps-title">
        <h2 id="apps-title">
          <Link href="/developers/apps">{t('developers.apps.title')}</Link>
        </h2>
        <p class="muted">{t('developers.apps.intro')}</p>
        <Applications headingLevel={3} />
      </section>
    </Page>
  );
}
