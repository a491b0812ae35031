// The account's OAuth applications (the developer portal): the list, and a form to register one. The
// client id, and a confidential application's secret, are shown once after registering, with Copy.
// Only an account owner manages applications (the API refuses anyone else with insufficient_scope).
import { useState } from 'preact/hooks';
import type { ApiFailure } from '../../../api/graphql.ts';
import { useMutation, useQuery } from '../../../api/hooks.ts';
import { useAccount, useCanWrite } from '../../../app/account.tsx';
import { ApplicationsDocument, CreateApplicationDocument, type ApplicationFieldsFragment } from '../../../graphql/generated.ts';
import { formatDateTime, useT } from '../../../i18n/index.ts';
import { CopyButton, Failure, Field, Loading, Page } from '../../../ui/components.tsx';
import { Link } from '../../../ui/Link.tsx';
import {
  allowedApiAccess,
  checkApplicationName,
  checkRedirectUris,
  MAX_APPLICATIONS,
  MAX_REDIRECT_URIS,
  type ApiAccessLevel,
} from './application-input.ts';

/** The list page (/developers/apps). */
export function ApplicationsPage() {
  const t = useT();
  return (
    <Page title={t('developers.apps.title')}>
      <p>
        <Link href="/developers">{t('developers.apps.back')}</Link>
      </p>
      <Applications headingLevel={2} />
    </Page>
  );
}

/** Says an API refusal of the applications in words: a viewer is told who manages them. */
export function ApplicationsFailure(props: { failure: ApiFailure; retry: () => void }) {
  const t = useT();
  if (props.failure.code === 'insufficient_scope') return <p class="notice">{t('developers.apps.ownersOnly')}</p>;
  if (props.failure.code === 'not_found') return <p class="notice">{t('developers.apps.notFound')}</p>;
  return <Failure failure={props.failure} retry={props.retry} />;
}

/** The applications, with the register form for an owner; also the landing page's section. */
export function Applications(props: { headingLevel: 2 | 3 }) {
  const t = useT();
  const canWrite = useCanWrite();
  const q = useQuery(ApplicationsDocument);
  const [created, setCreated] = useState<{ application: ApplicationFieldsFragment; secret: string | null } | undefined>(undefined);
  const H = props.headingLevel === 2 ? 'h2' : 'h3';
  if (q.failure) return <ApplicationsFailure failure={q.failure} retry={q.reload} />;
  if (!q.data) return <Loading />;
  const apps = q.data.applications;
  return (
    <div>
      {created && <CreatedSecrets application={created.application} secret={created.secret} onDone={() => setCreated(undefined)} />}
      {apps.length === 0 ? (
        <p>{t('developers.apps.empty')}</p>
      ) : (
        <div class="table-wrap">
          <table>
            <caption class="visually-hidden">{t('developers.apps.title')}</caption>
            <thead>
              <tr>
                <th scope="col">{t('developers.apps.col.name')}</th>
                <th scope="col">{t('developers.apps.col.clientId')}</th>
                <th scope="col">{t('developers.apps.col.type')}</th>
                <th scope="col">{t('developers.apps.col.access')}</th>
                <th scope="col" class="wide">
                  {t('developers.apps.col.created')}
                </th>
              </tr>
            </thead>
            <tbody>
              {apps.map((a) => (
                <tr key={a.id} data-application-id={a.id}>
                  <td>
                    <Link href={`/developers/apps/${encodeURIComponent(a.id)}`}>{a.name}</Link>
                  </td>
                  <td class="mono break">{a.id}</td>
                  <td>{a.public ? t('developers.apps.public') : t('developers.apps.confidential')}</td>
                  <td>{t(`developers.apps.access.${a.apiAccess}`)}</td>
                  <td class="wide">{formatDateTime(a.createdAt)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {canWrite &&
        (apps.length >= MAX_APPLICATIONS ? (
          <p class="warning" role="status">
            {t('developers.apps.limit', { max: MAX_APPLICATIONS })}
          </p>
        ) : (
          <RegisterApplication
            heading={H}
            onCreated={(application, secret) => {
              q.set({ applications: [...apps, application] });
              setCreated({ application, secret });
            }}
          />
        ))}
    </div>
  );
}

/** The client id and (confidential) secret, right after registering or rotating: the secret is never shown again. */
export function CreatedSecrets(props: { application: ApplicationFieldsFragment; secret: string | null; onDone: () => void; rotated?: boolean }) {
  const t = useT();
  const { application, secret } = props;
  return (
    <div class="notice" role="status">
      <p>{props.rotated ? t('developers.apps.rotated', { name: application.name }) : t('developers.apps.created', { name: application.name })}</p>
      <dl class="facts">
        <div>
          <dt>{t('developers.apps.clientId')}</dt>
          <dd class="row">
            <code class="secret" data-testid="client-id">
              {application.id}
            </code>
            <CopyButton text={application.id} label={t('developers.apps.clientId')} />
          </dd>
        </div>
        {secret && (
          <div>
            <dt>{t('developers.apps.clientSecret')}</dt>
            <dd class="row">
              <code class="secret" data-testid="client-secret">
                {secret}
              </code>
              <CopyButton text={secret} label={t('developers.apps.clientSecret')} />
            </dd>
          </div>
        )}
      </dl>
      {secret && <p>{t('developers.apps.secretOnce')}</p>}
      <p class="row">
        {!props.rotated && <Link href={`/developers/apps/${encodeURIComponent(application.id)}`}>{t('developers.apps.open', { name: application.name })}</Link>}
        <button type="button" onClick={props.onDone}>
          {secret ? t('developers.apps.secretDone') : t('common.close')}
        </button>
      </p>
    </div>
  );
}

function RegisterApplication(props: { heading: 'h2' | 'h3'; onCreated: (application: ApplicationFieldsFragment, secret: string | null) => void }) {
  const t = useT();
  const me = useAccount();
  const levels = allowedApiAccess(me.data?.me.role);
  const [name, setName] = useState('');
  const [uris, setUris] = useState('');
  const [isPublic, setPublic] = useState(false);
  const [access, setAccess] = useState<ApiAccessLevel>('NONE');
  const [errors, setErrors] = useState<{ name?: string | undefined; uris?: string | undefined }>({});
  const create = useMutation(CreateApplicationDocument);
  const H = props.heading;

  const urisError = (text: string): string | undefined => {
    const check = checkRedirectUris(text);
    if (check.none) return t('developers.apps.uris.none');
    if (check.tooMany) return t('developers.apps.uris.tooMany', { max: MAX_REDIRECT_URIS });
    const first = check.problems[0];
    return first && t(`developers.apps.uris.${first.problem}`, { line: first.line, uri: first.uri });
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    const nameProblem = checkApplicationName(name);
    const next = { name: nameProblem && t(`developers.apps.name.${nameProblem}`), uris: urisError(uris) };
    setErrors(next);
    if (next.name || next.uris) return;
    const result = await create.run({ input: { name: name.trim(), redirectUris: checkRedirectUris(uris).uris, public: isPublic, apiAccess: access } });
    if (!result) return;
    setName('');
    setUris('');
    setPublic(false);
    setAccess('NONE');
    props.onCreated(result.createApplication.application, result.createApplication.clientSecret ?? null);
  };

  // The gateway's invalid_request here is about the redirect URIs or the name; its words say which.
  const refused = create.failure?.code === 'invalid_request' ? t('developers.apps.refused', { reason: create.failure.message }) : undefined;
  return (
    <form class="card form" onSubmit={submit} noValidate aria-labelledby="register-app-title">
      <H id="register-app-title">{t('developers.apps.register')}</H>
      <Field label={t('developers.apps.name')} hint={t('developers.apps.nameHint')} error={errors.name}>
        {(attrs) => <input {...attrs} value={name} maxLength={200} autocomplete="off" onInput={(e) => setName(e.currentTarget.value)} />}
      </Field>
      <Field label={t('developers.apps.uris')} hint={t('developers.apps.urisHint')} error={errors.uris ?? refused}>
        {(attrs) => (
          <textarea
            {...attrs}
            rows={3}
            value={uris}
            spellcheck={false}
            autocomplete="off"
            onInput={(e) => {
              setUris(e.currentTarget.value);
              create.reset();
            }}
          />
        )}
      </Field>
      <fieldset class="field">
        <legend>{t('developers.apps.type')}</legend>
        <div class="check">
          <label>
            <input type="radio" name="app-type" checked={!isPublic} aria-describedby="app-type-confidential" onChange={() => setPublic(false)} /> {t('developers.apps.confidential')}
          </label>
          <p class="hint" id="app-type-confidential">
            {t('developers.apps.confidentialHint')}
          </p>
        </div>
        <div class="check">
          <label>
            <input type="radio" name="app-type" checked={isPublic} aria-describedby="app-type-public" onChange={() => setPublic(true)} /> {t('developers.apps.public')}
          </label>
          <p class="hint" id="app-type-public">
            {t('developers.apps.publicHint')}
          </p>
        </div>
      </fieldset>
      <Field label={t('developers.apps.access')} hint={t('developers.apps.accessHint')}>
        {(attrs) => (
          <select {...attrs} value={access} onChange={(e) => setAccess(e.currentTarget.value as ApiAccessLevel)}>
            {levels.map((level) => (
              <option key={level} value={level}>
                {t(`developers.apps.access.${level}`)}
              </option>
            ))}
          </select>
        )}
      </Field>
      {create.failure && !refused && <Failure failure={create.failure} />}
      <button type="submit" class="primary" disabled={create.running}>
        {create.running ? t('common.saving') : t('developers.apps.registerButton')}
      </button>
    </form>
  );
}
