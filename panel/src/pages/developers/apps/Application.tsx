// One OAuth application (/developers/apps/:id): its settings, the users who granted it access, and for an
// owner the two irreversible actions: rotate the secret (confirmed, saying everything issued to it ends)
// and delete (the application's name typed to confirm).
import { useState } from 'preact/hooks';
import { useMutation, useQuery } from '../../../api/hooks.ts';
import { useCanWrite } from '../../../app/account.tsx';
import { navigate } from '../../../app/router.ts';
import { ApplicationDetailDocument, DeleteApplicationDocument, RotateApplicationSecretDocument, type ApplicationFieldsFragment } from '../../../graphql/generated.ts';
import { formatDateTime, useT } from '../../../i18n/index.ts';
import { CopyButton, Failure, Loading, Page, TypedConfirm } from '../../../ui/components.tsx';
import { Link } from '../../../ui/Link.tsx';
import { ApplicationsFailure, CreatedSecrets } from './Applications.tsx';

export function ApplicationPage(props: { id: string }) {
  const t = useT();
  const canWrite = useCanWrite();
  const q = useQuery(ApplicationDetailDocument, { id: props.id });
  const [rotated, setRotated] = useState<{ application: ApplicationFieldsFragment; secret: string | null } | undefined>(undefined);
  const back = (
    <p>
      <Link href="/developers/apps">{t('developers.apps.backToList')}</Link>
    </p>
  );
  if (q.failure)
    return (
      <Page title={t('developers.apps.title')}>
        {back}
        <ApplicationsFailure failure={q.failure} retry={q.reload} />
      </Page>
    );
  if (!q.data) return <Page title={t('developers.apps.title')}>{<Loading />}</Page>;
  const app = q.data.application;
  return (
    <Page title={app.name}>
      {back}
      {rotated && <CreatedSecrets application={rotated.application} secret={rotated.secret} rotated onDone={() => setRotated(undefined)} />}
      <dl class="facts">
        <div>
          <dt>{t('developers.apps.clientId')}</dt>
          <dd class="row">
            <code class="break">{app.id}</code>
            <CopyButton text={app.id} label={t('developers.apps.clientId')} />
          </dd>
        </div>
        <div>
          <dt>{t('developers.apps.type')}</dt>
          <dd>{app.public ? t('developers.apps.public') : t('developers.apps.confidential')}</dd>
        </div>
        <div>
          <dt>{t('developers.apps.access')}</dt>
          <dd>{t(`developers.apps.access.${app.apiAccess}`)}</dd>
        </div>
        <div>
          <dt>{t('developers.apps.col.created')}</dt>
          <dd>{formatDateTime(app.createdAt)}</dd>
        </div>
        {!app.public && (
          <div>
            <dt>{t('developers.apps.secretChanged')}</dt>
            <dd>{app.secretRotatedAt ? formatDateTime(app.secretRotatedAt) : t('developers.apps.secretNever')}</dd>
          </div>
        )}
      </dl>
      <h2>{t('developers.apps.uris')}</h2>
      <ul class="item-list">
        {app.redirectUris.map((uri) => (
          <li key={uri}>
            <code class="break">{uri}</code>
          </li>
        ))}
      </ul>
      <h2 id="grants-title">{t('developers.apps.grants')}</h2>
      {app.grants.length === 0 ? (
        <p>{t('developers.apps.grantsEmpty')}</p>
      ) : (
        <div class="table-wrap">
          <table aria-labelledby="grants-title">
            <thead>
              <tr>
                <th scope="col">{t('developers.apps.grant.user')}</th>
                <th scope="col">{t('developers.apps.grant.since')}</th>
                <th scope="col" class="wide">
                  {t('developers.apps.grant.scopes')}
                </th>
              </tr>
            </thead>
            <tbody>
              {app.grants.map((g) => (
                <tr key={g.user.id}>
                  <td class="break">{[g.user.name, g.user.email].filter(Boolean).join(' · ') || <code>{g.user.id}</code>}</td>
                  <td>{formatDateTime(g.createdAt)}</td>
                  <td class="wide mono">{g.scopes.join(' ')}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {canWrite && (
        <>
          {!app.public && <RotateSecret app={app} onRotated={(application, secret) => setRotated({ application, secret })} />}
          <DeleteApplication app={app} />
        </>
      )}
    </Page>
  );
}

function RotateSecret(props: { app: ApplicationFieldsFragment; onRotated: (application: ApplicationFieldsFragment, secret: string | null) => void }) {
  const t = useT();
  const [confirming, setConfirming] = useState(false);
  const rotate = useMutation(RotateApplicationSecretDocument);
  return (
    <section aria-labelledby="rotate-title">
      <h2 id="rotate-title">{t('developers.apps.rotateTitle')}</h2>
      {!confirming ? (
        <button type="button" onClick={() => setConfirming(true)}>
          {t('developers.apps.rotate')}
        </button>
      ) : (
        <div class="danger-zone" role="group" aria-labelledby="rotate-title">
          <p>{t('developers.apps.rotateConsequence')}</p>
          {rotate.failure && <Failure failure={rotate.failure} />}
          <div class="row">
            <button
              type="button"
              class="danger"
              disabled={rotate.running}
              onClick={async () => {
                const result = await rotate.run({ id: props.app.id });
                if (!result) return;
                setConfirming(false);
                props.onRotated(result.rotateApplicationSecret.application, result.rotateApplicationSecret.clientSecret ?? null);
              }}
            >
              {rotate.running ? t('common.saving') : t('developers.apps.rotateConfirm')}
            </button>
            <button type="button" onClick={() => setConfirming(false)}>
              {t('common.cancel')}
            </button>
          </div>
        </div>
      )}
    </section>
  );
}

function DeleteApplication(props: { app: ApplicationFieldsFragment }) {
  const t = useT();
  const del = useMutation(DeleteApplicationDocument);
  return (
    <section aria-labelledby="delete-app-title">
      <h2 id="delete-app-title">{t('developers.apps.deleteTitle')}</h2>
      <TypedConfirm
        label={t('developers.apps.delete')}
        phrase={props.app.name}
        consequence={t('developers.apps.deleteConsequence')}
        prompt={t('developers.apps.deletePrompt', { name: props.app.name })}
        running={del.running}
        failure={del.failure}
        onConfirm={async () => {
          if (await del.run({ id: props.app.id })) navigate('/developers/apps');
        }}
      />
    </section>
  );
}
