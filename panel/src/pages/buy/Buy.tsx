// The buy page: name, origin, promocode and settings (a preset or custom), the price at today's rate and
// the balance it leaves before the click, and the API's refusals in words at the field they concern. One
// idempotency key per purchase attempt (purchase.ts PurchaseAttempt), so a double click or a retry after a
// lost answer never buys twice. On success, the new tunnel's page.
import { useMemo, useRef, useState } from 'preact/hooks';
import { ApiFailure, request } from '../../api/graphql.ts';
import { useQuery } from '../../api/hooks.ts';
import { useAccount, useCanWrite } from '../../app/account.tsx';
import { rub, usd } from '../../app/format.ts';
import { navigate } from '../../app/router.ts';
import { BuyPricingDocument, PurchaseTunnelDocument } from '../../graphql/generated.ts';
import { formatNumber, useT } from '../../i18n/index.ts';
import { Failure, Field, Loading, Page } from '../../ui/components.tsx';
import { ProtectionFields } from '../tunnel/ProtectionFields.tsx';
import { PRESETS, SETTINGS_FIELDS, draftOf, settingsInput, settingsOfDraft, type SettingsDraft } from '../tunnel/protection.ts';
import { PurchaseAttempt, balanceAfterCents, purchaseRefusal, type BuyField, type BuyRefusal } from './purchase.ts';

export function Buy() {
  const t = useT();
  const canWrite = useCanWrite();
  const me = useAccount();
  if (me.data && !canWrite)
    return (
      <Page title={t('buy.title')}>
        <p>{t('common.readOnly')}</p>
      </Page>
    );
  if (me.failure) return <Page title={t('buy.title')}><Failure failure={me.failure} retry={me.reload} /></Page>;
  if (!me.data) return <Page title={t('buy.title')}><Loading /></Page>;
  return <BuyForm />;
}

function BuyForm() {
  const t = useT();
  const me = useAccount();
  const pricing = useQuery(BuyPricingDocument);
  const [running, setRunning] = useState(false);
  const [name, setName] = useState('');
  const [originIp, setOriginIp] = useState('');
  const [promocode, setPromocode] = useState('');
  // A new buyer starts from "everything" (the API's default), one click from a preset or custom.
  const [draft, setDraft] = useState<SettingsDraft>(() => draftOf(PRESETS.everything));
  const [refusal, setRefusal] = useState<BuyRefusal | undefined>(undefined);
  const [localErrors, setLocalErrors] = useState<Partial<Record<BuyField, string>>>({});
  const attempt = useMemo(() => new PurchaseAttempt(newKey), []);
  const submitting = useRef(false);

  if (pricing.failure) return <Page title={t('buy.title')}><Failure failure={pricing.failure} retry={pricing.reload} /></Page>;
  if (!pricing.data || !me.data) return <Page title={t('buy.title')}><Loading /></Page>;
  const price = pricing.data.pricing;
  const balanceUsd = me.data.me.balanceUsd;
  const afterCents = balanceAfterCents(balanceUsd, price.priceUsd);
  const promo = promocode.trim();

  const refusalText = (r: BuyRefusal) => t(r.key, r.missingCents !== undefined ? { ...r.params, missing: usd(r.missingCents / 100) } : r.params);
  const errorAt = (field: BuyField): string | undefined => localErrors[field] ?? (refusal?.field === field ? refusalText(refusal) : undefined);

  const submit = async (e: Event) => {
    e.preventDefault();
    // A second submit while the first is in flight does nothing; a later one reuses the key (same input).
    if (submitting.current) return;
    const errors: Partial<Record<BuyField, string>> = {};
    if (originIp.trim() === '') errors.originIp = t('tunnel.origin.error.missing');
    const settings = settingsOfDraft(draft);
    if ('errors' in settings) for (const [field, key] of Object.entries(settings.errors)) errors[field as BuyField] = t(key);
    setLocalErrors(errors);
    setRefusal(undefined);
    if (Object.keys(errors).length || 'errors' in settings) return;
    const input = {
      originIp: originIp.trim(),
      ...(name.trim() ? { name: name.trim() } : {}),
      ...(promo ? { promocode: promo } : {}),
      ...settingsInput(settings.settings),
    };
    submitting.current = true;
    setRunning(true);
    try {
      const done = await request(PurchaseTunnelDocument, { input, idempotencyKey: attempt.keyFor(input) });
      me.reload();
      navigate(`/tunnels/${encodeURIComponent(done.purchaseTunnel.tunnel.id)}`);
    } catch (err) {
      const f = err instanceof ApiFailure ? err : new ApiFailure('server_error', String(err));
      setRefusal(purchaseRefusal(f.code, f.message, { priceUsd: price.priceUsd, balanceUsd }));
      // The balance shown may be older than the one refused (a top-up or a purchase elsewhere).
      if (f.code === 'insufficient_balance') me.reload();
    } finally {
      submitting.current = false;
      setRunning(false);
    }
  };

  /** Editing a field takes back the refusal shown at it (the next click asks the API again). */
  const edited = (field: BuyField) => {
    if (refusal?.field === field) setRefusal(undefined);
    if (localErrors[field]) setLocalErrors({ ...localErrors, [field]: undefined });
  };

  const editedSettings = () => {
    const fields: readonly BuyField[] = SETTINGS_FIELDS;
    if (refusal && fields.includes(refusal.field)) setRefusal(undefined);
    if (fields.some((f) => localErrors[f])) setLocalErrors(Object.fromEntries(Object.entries(localErrors).filter(([f]) => !fields.includes(f as BuyField))));
  };

  const priceError = errorAt('price');
  const formError = refusal?.field === 'form' ? refusalText(refusal) : undefined;
  return (
    <Page title={t('buy.title')}>
      <p>{t('buy.intro')}</p>
      <form class="buy" noValidate onSubmit={submit}>
        <Field label={t('buy.name')} hint={t('buy.name.hint')} error={errorAt('name')}>
          {(attrs) => <input {...attrs} value={name} maxLength={100} autocomplete="off" onInput={(e) => (setName(e.currentTarget.value), edited('name'))} />}
        </Field>
        <Field label={t('buy.origin')} hint={t('buy.origin.hint')} error={errorAt('originIp')}>
          {(attrs) => <input {...attrs} value={originIp} required inputMode="decimal" autocomplete="off" spellcheck={false} class="mono" onInput={(e) => (setOriginIp(e.currentTarget.value), edited('originIp'))} />}
        </Field>
        <Field label={t('buy.promocode')} hint={t('buy.promocode.hint')} error={errorAt('promocode')}>
          {(attrs) => <input {...attrs} value={promocode} autocomplete="off" spellcheck={false} onInput={(e) => (setPromocode(e.currentTarget.value), edited('promocode'))} />}
        </Field>
        <ProtectionFields
          draft={draft}
          onChange={(d) => {
            setDraft(d);
            editedSettings();
          }}
          errors={Object.fromEntries(SETTINGS_FIELDS.map((f) => [f, errorAt(f)]))}
        />
        <section class="card price" aria-labelledby="buy-price">
          <h2 id="buy-price">{t('buy.price.title')}</h2>
          <p data-testid="buy-price">{t('buy.price.line', { rub: rub(price.price), usd: usd(price.priceUsd), rate: formatNumber(price.usdRubRate) })}</p>
          <p data-testid="buy-balance">{t('buy.price.balance', { balance: usd(balanceUsd) })}</p>
          {afterCents >= 0 ? (
            <p data-testid="buy-balance-after">{t('buy.price.after', { after: usd(afterCents / 100) })}</p>
          ) : (
            !priceError && <p class="warning" data-testid="buy-short">{t('buy.price.short', { missing: usd(-afterCents / 100) })}</p>
          )}
          {promo && <p class="muted">{t('buy.price.promo')}</p>}
          {!price.availability.inStock && <p class="warning">{t('buy.outOfStock')}</p>}
          {priceError && (
            <p class="error" role="alert">
              {priceError}
            </p>
          )}
        </section>
        {formError && (
          <div class="alert" role="alert">
            <p>{formError}</p>
          </div>
        )}
        <p>
          <button type="submit" class="primary" disabled={running}>
            {running ? t('buy.submitting') : t('buy.submit')}
          </button>
        </p>
      </form>
    </Page>
  );
}

/** A fresh idempotency key: a UUID, or 128 random bits where randomUUID is missing (a page not served over https). */
function newKey(): string {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');
}
