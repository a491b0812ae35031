// The account's webhooks: the list (who added each, whether deliveries carry the origin), a form to add one
// (its signing secret shown once, with Copy), delete behind a confirmation. A webhook the gateway disabled
// says so and why (docs/CONTRACTS.md "Webhooks"): one disabled for failing offers Enable; one disabled
// because the key or application that added it was revoked offers nothing but delete (the gateway refuses
// to enable it). A viewer sees the list only.
import { useState } from 'preact/hooks';
import type { ApiFailure } from '../../api/graphql.ts';
import { useMutation, useQuery } from '../../api/hooks.ts';
import { useCanWrite } from '../../app/account.tsx';
import {
  AccountWebhooksDocument,
  CreateAccountWebhookDocument,
  DeleteAccountWebhookDocument,
  EnableAccountWebhookDocument,
  type WebhookEventType,
  type WebhookRowFragment,
} from '../../graphql/generated.ts';
import { formatDateTime, useT } from '../../i18n/index.ts';
import { CopyButton, Failure, Field, Loading } from '../../ui/components.tsx';
import { WebhookTest } from './WebhookTest.tsx';
import { checkWebhookUrl, MAX_WEBHOOKS, WEBHOOK_EVENTS } from './webhook-input.ts';

export function Webhooks() {
  const t = useT();
  const canWrite = useCanWrite();
  const q = useQuery(AccountWebhooksDocument);
  const [created, setCreated] = useState<{ url: string; secret: string } | undefined>(undefined);
  const rows = q.data?.webhooks ?? [];
  const setRows = (webhooks: WebhookRowFragment[]) => q.set({ webhooks });

  return (
    <section aria-labelledby="webhooks-title">
      <h2 id="webhooks-title">{t('account.webhooks.title')}</h2>
      <p class="muted">{t('account.webhooks.intro')}</p>
      {q.failure ? (
        <Failure failure={q.failure} retry={q.reload} />
      ) : !q.data ? (
        <Loading />
      ) : (
        <>
          {created && (
            <div class="notice" role="status">
              <p>{t('account.webhooks.created', { url: created.url })}</p>
              <p>{t('account.webhooks.secretOnce')}</p>
              <p class="row">
                <code class="secret" data-testid="webhook-secret">
                  {created.secret}
                </code>
                <CopyButton text={created.secret} label={t('account.webhooks.secret')} />
              </p>
              <button type="button" onClick={() => setCreated(undefined)}>
                {t('account.webhooks.secretDone')}
              </button>
            </div>
          )}
          {rows.length === 0 ? (
            <p>{t('account.webhooks.empty')}</p>
          ) : (
            <ul class="item-list">
              {rows.map((w) => (
                <WebhookItem
                  key={w.id}
                  webhook={w}
                  canWrite={canWrite}
                  onDeleted={() => setRows(rows.filter((r) => r.id !== w.id))}
                  onChanged={(changed) => setRows(rows.map((r) => (r.id === changed.id ? changed : r)))}
                />
              ))}
            </ul>
          )}
          {canWrite &&
            (rows.length >= MAX_WEBHOOKS ? (
              <p class="warning">{t('account.webhooks.limit', { max: MAX_WEBHOOKS })}</p>
            ) : (
              <AddWebhook
                onCreated={(webhook, secret) => {
                  setRows([...rows, webhook]);
                  setCreated({ url: webhook.url, secret });
                }}
              />
            ))}
        </>
      )}
    </section>
  );
}

function WebhookItem(props: { webhook: WebhookRowFragment; canWrite: boolean; onDeleted: () => void; onChanged: (w: WebhookRowFragment) => void }) {
  const t = useT();
  const { webhook } = props;
  const [confirming, setConfirming] = useState(false);
  const del = useMutation(DeleteAccountWebhookDocument);
  const enable = useMutation(EnableAccountWebhookDocument);
  // Its credential is gone: the gateway refuses to enable it, so the page does not offer to.
  const revoked = webhook.disabledReason === 'credential_revoked';
  return (
    <li class="item" data-webhook-id={webhook.id}>
      <p class="item-title">
        <code class="break">{webhook.url}</code>
      </p>
      <p class="muted">
        {webhook.events.map((e) => t(`account.webhooks.event.${e}`)).join(', ')} · {t('account.webhooks.since', { date: formatDateTime(webhook.createdAt) })}
        {webhook.createdBy && <> · {t(`account.webhooks.by.${webhook.createdBy.kind}`, { id: webhook.createdBy.id ?? '' })}</>}
      </p>
      {webhook.includeOrigin && <p class="muted">{t('account.webhooks.withOrigin')}</p>}
      {webhook.disabledAt && (
        <p class="warning" data-testid="webhook-disabled">
          {webhook.disabledReason === 'failing'
            ? t('account.webhooks.disabled', { date: formatDateTime(webhook.disabledAt) })
            : revoked
              ? t('account.webhooks.disabledRevoked', { date: formatDateTime(webhook.disabledAt) })
              : t('account.webhooks.disabledOther', { date: formatDateTime(webhook.disabledAt), reason: webhook.disabledReason ?? '' })}
        </p>
      )}
      {enable.failure && <Failure failure={enable.failure} />}
      {props.canWrite && (
        <div class="row">
          {!webhook.disabledAt ? (
            <WebhookTest id={webhook.id} url={webhook.url} />
          ) : (
            !revoked && (
              <button
                type="button"
                disabled={enable.running}
                aria-label={t('account.webhooks.enable', { url: webhook.url })}
                onClick={async () => {
                  const result = await enable.run({ id: webhook.id });
                  if (result) props.onChanged(result.enableWebhook);
                }}
              >
                {enable.running ? t('common.saving') : t('account.webhooks.enableShort')}
              </button>
            )
          )}
          {!confirming && (
            <button type="button" aria-label={t('account.webhooks.delete', { url: webhook.url })} onClick={() => setConfirming(true)}>
              {t('common.delete')}
            </button>
          )}
        </div>
      )}
      {confirming && (
        <div class="danger-zone" role="group" aria-label={t('account.webhooks.confirmGroup', { url: webhook.url })}>
          <p>{t('account.webhooks.confirm', { url: webhook.url })}</p>
          {del.failure && <Failure failure={del.failure} />}
          <div class="row">
            <button
              type="button"
              class="danger"
              disabled={del.running}
              aria-label={t('account.webhooks.confirmDelete', { url: webhook.url })}
              onClick={async () => {
                if (await del.run({ id: webhook.id })) props.onDeleted();
              }}
            >
              {del.running ? t('common.saving') : t('account.webhooks.confirmDeleteShort')}
            </button>
            <button type="button" onClick={() => setConfirming(false)}>
              {t('common.cancel')}
            </button>
          </div>
        </div>
      )}
    </li>
  );
}

function AddWebhook(props: { onCreated: (webhook: WebhookRowFragment, secret: string) => void }) {
  const t = useT();
  const [url, setUrl] = useState('');
  const [events, setEvents] = useState<WebhookEventType[]>([...WEBHOOK_EVENTS]);
  const [includeOrigin, setIncludeOrigin] = useState(false);
  const [urlError, setUrlError] = useState<string | undefined>(undefined);
  const [eventsError, setEventsError] = useState<string | undefined>(undefined);
  const create = useMutation(CreateAccountWebhookDocument);

  const refusal = (f: ApiFailure | undefined) => {
    if (!f) return undefined;
    // The API says why in `message` (a URL it cannot deliver to, the cap of 10); it concerns the URL.
    if (f.code === 'invalid_request') return t('account.webhooks.refused', { reason: f.message });
    return undefined;
  };

  const submit = async (e: Event) => {
    e.preventDefault();
    const problem = checkWebhookUrl(url);
    setUrlError(problem && t(`account.webhooks.url.${problem}`));
    setEventsError(events.length === 0 ? t('account.webhooks.eventsRequired') : undefined);
    if (problem || events.length === 0) return;
    const result = await create.run({ input: { url: url.trim(), events, includeOrigin } });
    if (!result) return;
    setUrl('');
    setEvents([...WEBHOOK_EVENTS]);
    setIncludeOrigin(false);
    props.onCreated(result.createWebhook.webhook, result.createWebhook.secret);
  };

  const serverUrlError = refusal(create.failure);
  return (
    <form class="card form" onSubmit={submit} noValidate aria-labelledby="add-webhook-title">
      <h3 id="add-webhook-title">{t('account.webhooks.add')}</h3>
      <Field label={t('account.webhooks.url')} hint={t('account.webhooks.urlHint')} error={urlError ?? serverUrlError}>
        {(attrs) => (
          <input
            {...attrs}
            type="url"
            inputMode="url"
            autocomplete="off"
            spellcheck={false}
            value={url}
            onInput={(e) => {
              setUrl(e.currentTarget.value);
              setUrlError(undefined);
              create.reset();
            }}
          />
        )}
      </Field>
      <fieldset class="field" aria-describedby={eventsError ? 'webhook-events-error' : undefined}>
        <legend>{t('account.webhooks.events')}</legend>
        {WEBHOOK_EVENTS.map((ev) => (
          <label key={ev} class="check">
            <input
              type="checkbox"
              checked={events.includes(ev)}
              onChange={(e) => {
                setEventsError(undefined);
                setEvents(e.currentTarget.checked ? WEBHOOK_EVENTS.filter((x) => x === ev || events.includes(x)) : events.filter((x) => x !== ev));
              }}
            />{' '}
            {t(`account.webhooks.event.${ev}`)}
          </label>
        ))}
        {eventsError && (
          <p class="error" id="webhook-events-error" role="alert">
            {eventsError}
          </p>
        )}
      </fieldset>
      <div class="field">
        <label class="check">
          <input type="checkbox" checked={includeOrigin} aria-describedby="webhook-origin-hint" onChange={(e) => setIncludeOrigin(e.currentTarget.checked)} />{' '}
          {t('account.webhooks.includeOrigin')}
        </label>
        <p class="muted" id="webhook-origin-hint">
          {t('account.webhooks.includeOriginHint')}
        </p>
      </div>
      {create.failure && !serverUrlError && <Failure failure={create.failure} />}
      <button type="submit" class="primary" disabled={create.running}>
        {create.running ? t('common.saving') : t('account.webhooks.addButton')}
      </button>
    </form>
  );
}
