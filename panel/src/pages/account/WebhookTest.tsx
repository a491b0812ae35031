// Sends a webhook.test event to one webhook, signed and delivered like any event, and says it is queued
// (the delivery itself happens in the background, with the usual retries).
import { useState } from 'preact/hooks';
import { useMutation } from '../../api/hooks.ts';
import { TestAccountWebhookDocument } from '../../graphql/generated.ts';
import { useT } from '../../i18n/index.ts';
import { Failure } from '../../ui/components.tsx';

export function WebhookTest(props: { id: string; url: string }) {
  const t = useT();
  const test = useMutation(TestAccountWebhookDocument);
  const [queued, setQueued] = useState<string | undefined>(undefined);
  return (
    <>
      <button
        type="button"
        disabled={test.running}
        aria-label={t('account.webhooks.test', { url: props.url })}
        onClick={async () => {
          setQueued(undefined);
          const result = await test.run({ id: props.id });
          if (result) setQueued(result.testWebhook.messageId);
        }}
      >
        {test.running ? t('account.webhooks.testing') : t('account.webhooks.testShort')}
      </button>
      <span role="status" class="muted">
        {queued && t('account.webhooks.testQueued', { id: queued })}
      </span>
      {test.failure && <Failure failure={test.failure} />}
    </>
  );
}
