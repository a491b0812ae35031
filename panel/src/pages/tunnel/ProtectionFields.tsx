// The settings fields the buy page and the tunnel page share: a preset (web, game, everything) or custom,
// which shows ports, protocol, SYN proxy, the per-source limit and fragments, each explained in a sentence
// (docs/BUYER.md "Tunnel settings"); then, whatever the choice, the attack settings: the connection table's
// size and the alert threshold (docs/CONTRACTS.md "Attacks"). SettingsSummary is the same settings as text, for a read-only role.
import type { ComponentChildren } from 'preact';
import { useId } from 'preact/hooks';
import { formatNumber, useT } from '../../i18n/index.ts';
import type { MessageKey } from '../../i18n/en.ts';
import { Field } from '../../ui/components.tsx';
import { CHOICES, PROTOCOLS, choose, type Settings, type SettingsDraft, type SettingsField } from './protection.ts';

export function ProtectionFields(props: { draft: SettingsDraft; onChange: (d: SettingsDraft) => void; errors: Partial<Record<SettingsField, string>> }) {
  const t = useT();
  const group = useId();
  const { draft, onChange, errors } = props;
  const set = (change: Partial<SettingsDraft>) => onChange({ ...draft, ...change });
  return (
    <fieldset class="settings">
      <legend>{t('tunnel.settings.title')}</legend>
      <fieldset class="choices">
        <legend>{t('tunnel.settings.preset')}</legend>
        {CHOICES.map((choice) => (
          <div class="choice" key={choice}>
            <label>
              <input type="radio" name={`${group}-preset`} value={choice} checked={draft.choice === choice} aria-describedby={`${group}-${choice}-hint`} onChange={() => onChange(choose(draft, choice))} />{' '}
              {t(`tunnel.settings.preset.${choice}` as MessageKey)}
            </label>
            <p class="hint" id={`${group}-${choice}-hint`}>
              {t(`tunnel.settings.preset.${choice}.hint` as MessageKey)}
            </p>
          </div>
        ))}
      </fieldset>
      {draft.choice === 'custom' && (
        <div class="custom">
          <Field label={t('tunnel.settings.ports')} hint={t('tunnel.settings.ports.hint')} error={errors.ports}>
            {(attrs) => <input {...attrs} value={draft.ports} autocomplete="off" spellcheck={false} onInput={(e) => set({ ports: e.currentTarget.value })} />}
          </Field>
          <Field label={t('tunnel.settings.protocol')} hint={t('tunnel.settings.protocol.hint')} error={errors.protocol}>
            {(attrs) => (
              <select {...attrs} value={draft.protocol} onChange={(e) => set({ protocol: e.currentTarget.value as SettingsDraft['protocol'] })}>
                {PROTOCOLS.map((p) => (
                  <option key={p} value={p}>
                    {t(`tunnel.settings.protocol.${p}` as MessageKey)}
                  </option>
                ))}
              </select>
            )}
          </Field>
          <Check label={t('tunnel.settings.synProxy')} hint={t('tunnel.settings.synProxy.hint')} error={errors.synProxy} checked={draft.synProxy} onChange={(synProxy) => set({ synProxy })} />
          <Field label={t('tunnel.settings.pps')} hint={t('tunnel.settings.pps.hint')} error={errors.sourcePpsLimit}>
            {(attrs) => <input {...attrs} value={draft.pps} inputMode="numeric" autocomplete="off" onInput={(e) => set({ pps: e.currentTarget.value })} />}
          </Field>
          <Check label={t('tunnel.settings.dropFragments')} hint={t('tunnel.settings.dropFragments.hint')} error={errors.dropFragments} checked={draft.dropFragments} onChange={(dropFragments) => set({ dropFragments })} />
        </div>
      )}
      <fieldset class="limits">
        <legend>{t('tunnel.settings.limits')}</legend>
        <Field label={t('tunnel.settings.maxFlows')} hint={t('tunnel.settings.maxFlows.hint')} error={errors.maxFlows}>
          {(attrs) => <input {...attrs} value={draft.maxFlows} inputMode="numeric" autocomplete="off" onInput={(e) => set({ maxFlows: e.currentTarget.value })} />}
        </Field>
        <Field label={t('tunnel.settings.alertPps')} hint={t('tunnel.settings.alertPps.hint')} error={errors.alertPps}>
          {(attrs) => <input {...attrs} value={draft.alertPps} inputMode="numeric" autocomplete="off" placeholder={t('tunnel.settings.automatic')} onInput={(e) => set({ alertPps: e.currentTarget.value })} />}
        </Field>
      </fieldset>
    </fieldset>
  );
}

/** A checkbox with its label beside it, its hint and its error. */
function Check(props: { label: string; hint: string; error: string | undefined; checked: boolean; onChange: (v: boolean) => void }) {
  const id = useId();
  return (
    <div class={`field check${props.error ? ' field-invalid' : ''}`}>
      <input type="checkbox" id={id} checked={props.checked} aria-invalid={Boolean(props.error)} aria-describedby={`${id}-hint${props.error ? ` ${id}-error` : ''}`} onChange={(e) => props.onChange(e.currentTarget.checked)} />
      <label for={id}>{props.label}</label>
      <p class="hint" id={`${id}-hint`}>
        {props.hint}
      </p>
      {props.error && (
        <p class="error" id={`${id}-error`} role="alert">
          {props.error}
        </p>
      )}
    </div>
  );
}

/** The settings as text: what a read-only role sees (`children`: rows of the same list before them). */
export function SettingsSummary(props: { settings: Settings; children?: ComponentChildren }) {
  const t = useT();
  const s = props.settings;
  const yesNo = (v: boolean) => (v ? t('common.yes') : t('common.no'));
  return (
    <dl class="facts">
      {props.children}
      <dt>{t('tunnel.settings.ports')}</dt>
      <dd class="mono">{s.ports === '*' ? t('tunnel.settings.allPorts') : s.ports}</dd>
      <dt>{t('tunnel.settings.protocol')}</dt>
      <dd>{t(`tunnel.settings.protocol.${s.protocol}` as MessageKey)}</dd>
      <dt>{t('tunnel.settings.synProxy')}</dt>
      <dd>{yesNo(s.synProxy)}</dd>
      <dt>{t('tunnel.settings.pps')}</dt>
      <dd>{s.sourcePpsLimit === null ? t('tunnel.settings.noLimit') : formatNumber(s.sourcePpsLimit)}</dd>
      <dt>{t('tunnel.settings.dropFragments')}</dt>
      <dd>{yesNo(s.dropFragments)}</dd>
      <dt>{t('tunnel.settings.maxFlows')}</dt>
      <dd>{formatNumber(s.maxFlows)}</dd>
      <dt>{t('tunnel.settings.alertPps')}</dt>
      <dd>{s.alertPps === null ? t('tunnel.settings.automatic') : formatNumber(s.alertPps)}</dd>
    </dl>
  );
}
