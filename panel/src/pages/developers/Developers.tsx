// The developer portal's landing: the two API references and the account's OAuth applications.
import { useT } from '../../i18n/index.ts';
import { Page } from '../../ui/components.tsx';
import { Link } from '../../ui/Link.tsx';

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
    </Page>
  );
}
