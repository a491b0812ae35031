// One tunnel: its addresses with status and health badges that change live (the tunnelStatus
// subscription; no polling), the three steps that bring it up (the origin script, provision, activate),
// its traffic, its settings and origin, and its deletion. A read-only role sees all of it as text, with
// no control that writes.
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiFailure, request } from '../../api/graphql.ts';
import { useQuery, useSubscription } from '../../api/hooks.ts';
import { useCanWrite } from '../../app/account.tsx';
import type { RouteProps } from '../../app/router.ts';
import {
  ActivateTunnelDocument,
  DeleteTunnelDocument,
  ProvisionTunnelDocument,
  TunnelLiveDocument,
  TunnelPageDocument,
  TunnelSetupScriptsDocument,
  UpdateTunnelDocument,
  type TunnelDetailFragment,
  type UpdateTunnelInput,
} from '../../graphql/generated.ts';
import { formatDateTime, useT } from '../../i18n/index.ts';
import { Badge, CopyButton, DownloadButton, Failure, Field, Loading, Page, TypedConfirm } from '../../ui/components.tsx';
import { Link } from '../../ui/Link.tsx';
import { activateRefusal, canActivate, canProvision, isLive, newer, saveOutcome, stepStates, updateRefusal, type SavedChange, type StepState, type UpdateField } from './lifecycle.ts';
import { ProtectionFields, SettingsSummary } from './ProtectionFields.tsx';
import { draftOf, sameSettings, settingsInput, settingsOfDraft, SETTINGS_FIELDS, type Settings, type SettingsDraft } from './protection.ts';
import { Attacks } from './attacks/Attacks.tsx';
import { tunnelEvents } from './attacks/attacks.ts';
import { TrafficSection } from './traffic/TrafficSection.tsx';
import { LiveTraffic } from './traffic/LiveTraffic.tsx';
import { healthMarks } from './traffic/healthMarks.ts';

type Tunnel = TunnelDetailFragment;
type Accept = (t: Tunnel) => void;

const settingsOfTunnel = (t: Tunnel): Settings => ({
  ports: t.ports,
  protocol: t.protocol === 'tcp' || t.protocol === 'udp' ? t.protocol : 'both',
  synProxy: t.protection.synProxy,
  sourcePpsLimit: t.protection.sourcePpsLimit ?? null,
  dropFragments: t.protection.dropFragments,
  maxFlows: t.protection.maxFlows,
  alertPps: t.protection.alertPps ?? null,
});

export function TunnelPage(props: RouteProps) {
  const id = props.params.id ?? '';
  const t = useT();
  const q = useQuery(TunnelPageDocument, { id });
  // The freshest view of the tunnel, from the query, the live subscription and the mutations' answers alike.
  const [held, setHeld] = useState<Tunnel | undefined>(undefined);
  const accept: Accept = (incoming) => setHeld((prev) => newer(prev, incoming));
  useEffect(() => {
    if (q.data) accept(q.data.tunnel);
  }, [q.data]);
  // The one subscription of the page: its health reports also feed the traffic chart's live marks
  // (traffic/healthMarks.ts), so the traffic section needs none of its own.
  const liveFailure = useSubscription(
    TunnelLiveDocument,
    { id },
    (d) => {
      accept(d.tunnelStatus);
      healthMarks.observe(d.tunnelStatus.id, d.tunnelStatus.health, Date.now());
      tunnelEvents.fire(d.tunnelStatus.id);
    },
    !q.data,
  );

  if (q.failure)
    return (
      <Page title={t('tunnel.title')}>
        {q.failure.code === 'not_found' ? <p>{t('tunnel.notFound')}</p> : <Failure failure={q.failure} retry={q.reload} />}
        <p>
          <Link href="/">{t('common.back')}</Link>
        </p>
      </Page>
    );
  const tunnel = held ?? q.data?.tunnel;
  if (!tunnel) return <Page title={t('tunnel.title')}><Loading /></Page>;
  return <TunnelView tunnel={tunnel} accept={accept} liveLost={liveFailure !== undefined} />;
}

function TunnelView(props: { tunnel: Tunnel; accept: Accept; liveLost: boolean }) {
  const t = useT();
  const canWrite = useCanWrite();
  const { tunnel, accept } = props;
  const live = isLive(tunnel.status);
  return (
    <Page title={tunnel.name ?? tunnel.protectedIp}>
      {props.liveLost && <p class="warning">{t('tunnel.liveLost')}</p>}
      <dl class="facts" aria-label={t('tunnel.facts')}>
        <dt>{t('tunnel.protectedIp')}</dt>
        <dd class="mono" data-testid="protected-ip">{tunnel.protectedIp}</dd>
        <dt>{t('tunnel.edgeIp')}</dt>
        <dd class="mono" data-testid="edge-ip">{tunnel.edgeIp}</dd>
        <dt>{t('tunnel.originIp')}</dt>
        <dd class="mono" data-testid="origin-ip">{tunnel.originIp}</dd>
        <dt>{t('tunnel.tunnelName')}</dt>
        <dd class="mono">{tunnel.tunnelName}</dd>
        <dt>{t('tunnel.status')}</dt>
        <dd aria-live="polite">
          <Badge kind="status" value={tunnel.status} />
        </dd>
        <dt>{t('tunnel.health')}</dt>
        <dd aria-live="polite">
          <Badge kind="health" value={tunnel.health} />{' '}
          <span class="muted">{tunnel.healthCheckedAt ? t('tunnel.checkedAt', { when: formatDateTime(tunnel.healthCheckedAt) }) : t('tunnel.neverChecked')}</span>
        </dd>
      </dl>
      {!canWrite && <p class="muted">{t('common.readOnly')}</p>}
      {live && <Setup tunnel={tunnel} accept={accept} canWrite={canWrite} />}
      {/* The traffic chart: pages/tunnel/traffic/TrafficSection.tsx; the live one only for a tunnel on its edge. */}
      {(tunnel.status === 'PROVISIONED' || tunnel.status === 'ACTIVE') && <LiveTraffic tunnelId={tunnel.id} />}
      <TrafficSection tunnelId={tunnel.id} />
      {/* The tunnel's attacks: pages/tunnel/attacks/Attacks.tsx (read again on each live event). */}
      <Attacks tunnelId={tunnel.id} />
      <section aria-labelledby="settings-title">
        <h2 id="settings-title">{t('tunnel.settings.section')}</h2>
        {canWrite && live ? (
          <SettingsForm tunnel={tunnel} accept={accept} />
        ) : (
          <SettingsSummary settings={settingsOfTunnel(tunnel)}>
            <dt>{t('tunnel.name')}</dt>
            <dd>{tunnel.name ?? t('common.none')}</dd>
            <dt>{t('tunnel.originIp')}</dt>
            <dd class="mono">{tunnel.originIp}</dd>
          </SettingsSummary>
        )}
      </section>
      {live ? canWrite && <Delete tunnel={tunnel} accept={accept} /> : <p class="notice" role="status">{t(tunnel.status === 'DELETED' ? 'tunnel.deleted' : 'tunnel.deleting')}</p>}
    </Page>
  );
}

function StepHead(props: { title: string; state: StepState }) {
  const t = useT();
  return (
    <h3>
      {props.title} <span class={`step-state step-${props.state}`}>{t(`tunnel.step.${props.state}`)}</span>
    </h3>
  );
}

/** The three steps of the tunnel API document's order: the scripts on the origin, provision, activate. */
function Setup(props: { tunnel: Tunnel; accept: Accept; canWrite: boolean }) {
  const t = useT();
  const { tunnel, accept, canWrite } = props;
  const [s1, s2, s3] = stepStates(tunnel.status);
  const setup = useQuery(TunnelSetupScriptsDocument, { id: tunnel.id });
  // The scripts carry the origin and its GRE key: fetched again when the origin changed.
  const origin = useRef(tunnel.originIp);
  useEffect(() => {
    if (origin.current === tunnel.originIp) return;
    origin.current = tunnel.originIp;
    setup.reload();
  }, [tunnel.originIp]);
  const [provisioning, setProvisioning] = useState(false);
  const [provisionFailure, setProvisionFailure] = useState<ApiFailure | undefined>(undefined);
  const [activating, setActivating] = useState(false);
  const [activateFailure, setActivateFailure] = useState<ApiFailure | undefined>(undefined);
  useEffect(() => {
    if (tunnel.status === 'ACTIVE') setActivateFailure(undefined);
  }, [tunnel.status]);

  const provision = async () => {
    if (provisioning) return;
    setProvisioning(true);
    setProvisionFailure(undefined);
    try {
      accept((await request(ProvisionTunnelDocument, { id: tunnel.id })).provisionTunnel);
    } catch (e) {
      setProvisionFailure(e instanceof ApiFailure ? e : new ApiFailure('server_error', String(e)));
    } finally {
      setProvisioning(false);
    }
  };
  const activate = async () => {
    if (activating) return;
    setActivating(true);
    setActivateFailure(undefined);
    try {
      accept((await request(ActivateTunnelDocument, { id: tunnel.id })).activateTunnel);
    } catch (e) {
      setActivateFailure(e instanceof ApiFailure ? e : new ApiFailure('server_error', String(e)));
    } finally {
      setActivating(false);
    }
  };

  const unitFile = `tunnelgate-${tunnel.tunnelName}.service`;
  const installed = `/usr/local/sbin/tunnelgate-${tunnel.tunnelName}.sh`;
  const refusal = activateFailure && activateRefusal(activateFailure.code, activateFailure.message);
  return (
    <section aria-labelledby="setup-title">
      <h2 id="setup-title">{t('tunnel.setup.title')}</h2>
      <p>{t('tunnel.setup.intro')}</p>
      <ol class="steps">
        <li class={`step step-${s1}`} aria-current={s1 === 'current' ? 'step' : undefined} data-step="script" data-state={s1}>
          <StepHead title={t('tunnel.step1.title')} state={s1} />
          <p>{t('tunnel.step1.intro')}</p>
          {setup.failure && <Failure failure={setup.failure} retry={setup.reload} />}
          {!setup.data && !setup.failure && <Loading />}
          {setup.data && (
            <>
              <h4>{t('tunnel.step1.script')}</h4>
              <div class="row">
                <CopyButton text={setup.data.tunnelSetup.scripts.origin} label={t('tunnel.step1.script')} />
                <DownloadButton text={setup.data.tunnelSetup.scripts.origin} filename="origin.sh" label={t('tunnel.step1.script')} />
              </div>
              <pre tabIndex={0} aria-label={t('tunnel.step1.script')} data-testid="origin-script">
                {setup.data.tunnelSetup.scripts.origin}
              </pre>
              <p>{t('tunnel.step1.run')}</p>
              <pre class="command" tabIndex={0} aria-label={t('tunnel.step1.runCommand')}>
                sudo bash origin.sh
              </pre>
              <p>{t('tunnel.step1.install')}</p>
              <pre class="command" tabIndex={0} aria-label={t('tunnel.step1.installCommand')}>
                sudo bash origin.sh --install
              </pre>
              <h4>{t('tunnel.step1.unit')}</h4>
              <div class="row">
                <CopyButton text={setup.data.tunnelSetup.scripts.systemdOrigin} label={t('tunnel.step1.unit')} />
                <DownloadButton text={setup.data.tunnelSetup.scripts.systemdOrigin} filename={unitFile} label={t('tunnel.step1.unit')} />
              </div>
              <pre tabIndex={0} aria-label={t('tunnel.step1.unit')} data-testid="systemd-unit">
                {setup.data.tunnelSetup.scripts.systemdOrigin}
              </pre>
              <p>{t('tunnel.step1.unitManual')}</p>
              <pre class="command" tabIndex={0} aria-label={t('tunnel.step1.unitCommands')}>
                {`sudo install -m 0755 origin.sh ${installed}\nsudo cp ${unitFile} /etc/systemd/system/${unitFile}\nsudo systemctl daemon-reload && sudo systemctl enable --now ${unitFile}`}
              </pre>
              <p class="muted">{t('tunnel.step1.udp')}</p>
            </>
          )}
        </li>
        <li class={`step step-${s2}`} aria-current={s2 === 'current' ? 'step' : undefined} data-step="provision" data-state={s2}>
          <StepHead title={t('tunnel.step2.title')} state={s2} />
          <p>{t('tunnel.step2.intro')}</p>
          <p role="status" data-testid="provision-state">
            {t(`tunnel.step2.${tunnel.status === 'ACTIVE' ? 'PROVISIONED' : tunnel.status === 'DELETING' || tunnel.status === 'DELETED' ? 'PENDING' : tunnel.status}`)}
          </p>
          {provisionFailure && (
            <div class="alert" role="alert">
              <p>{provisionFailure.code === 'edge_unavailable' ? t('tunnel.edgeUnavailable') : t('tunnel.failed', { message: provisionFailure.message })}</p>
            </div>
          )}
          {canWrite && canProvision(tunnel.status) && (
            <button type="button" class="primary" disabled={provisioning} onClick={provision}>
              {provisioning ? t('tunnel.provisioning') : t('tunnel.provision')}
            </button>
          )}
        </li>
        <li class={`step step-${s3}`} aria-current={s3 === 'current' ? 'step' : undefined} data-step="activate" data-state={s3}>
          <StepHead title={t('tunnel.step3.title')} state={s3} />
          <p>{t('tunnel.step3.intro')}</p>
          <p role="status" data-testid="activate-state">
            {tunnel.status === 'ACTIVE' ? t('tunnel.step3.done', { ip: tunnel.protectedIp }) : canActivate(tunnel.status) ? t('tunnel.step3.ready') : t('tunnel.step3.waiting')}
          </p>
          {refusal && activateFailure && (
            <div class="alert" role="alert" data-testid="activate-refusal">
              {refusal.kind === 'probe' ? (
                <>
                  <p>{t('tunnel.activate.probeFailed')}</p>
                  <blockquote>{activateFailure.message}</blockquote>
                  <p>{t('tunnel.activate.check')}</p>
                  <ul>
                    <li>{t('tunnel.activate.check.script')}</li>
                    <li>{t('tunnel.activate.check.gre', { edge: tunnel.edgeIp })}</li>
                    <li>{t('tunnel.activate.check.link', { link: tunnel.tunnelName })}</li>
                    <li>{t('tunnel.activate.check.origin', { origin: tunnel.originIp })}</li>
                  </ul>
                </>
              ) : refusal.kind === 'edge' ? (
                <p>{t(refusal.key)}</p>
              ) : (
                <p>{t(refusal.key, { message: activateFailure.message })}</p>
              )}
            </div>
          )}
          {canWrite && canActivate(tunnel.status) && (
            <button type="button" class="primary" disabled={activating} onClick={activate}>
              {activating ? t('tunnel.activating') : t('tunnel.activate')}
            </button>
          )}
        </li>
      </ol>
    </section>
  );
}

/** Name, origin and settings, saved with updateTunnel; then where the change is (lifecycle.ts saveOutcome). */
function SettingsForm(props: { tunnel: Tunnel; accept: Accept }) {
  const t = useT();
  const { tunnel, accept } = props;
  const [name, setName] = useState(tunnel.name ?? '');
  const [originIp, setOriginIp] = useState(tunnel.originIp);
  const [draft, setDraft] = useState<SettingsDraft>(() => draftOf(settingsOfTunnel(tunnel)));
  const [errors, setErrors] = useState<Partial<Record<UpdateField, string>>>({});
  const [saving, setSaving] = useState(false);
  const [saved, setSaved] = useState<SavedChange | 'nothing' | undefined>(undefined);

  const originMoved = originIp.trim() !== tunnel.originIp;
  const submit = async (e: Event) => {
    e.preventDefault();
    if (saving) return;
    setSaved(undefined);
    const local: Partial<Record<UpdateField, string>> = {};
    if (originIp.trim() === '') local.originIp = t('tunnel.origin.error.missing');
    const settings = settingsOfDraft(draft);
    if ('errors' in settings) for (const [field, key] of Object.entries(settings.errors)) local[field as UpdateField] = t(key);
    setErrors(local);
    if (Object.keys(local).length || 'errors' in settings) return;
    const input: UpdateTunnelInput = {};
    const newName = name.trim() === '' ? null : name.trim();
    if (newName !== (tunnel.name ?? null)) input.name = newName;
    if (originMoved) input.originIp = originIp.trim();
    const specChanged = !sameSettings(settings.settings, settingsOfTunnel(tunnel));
    if (specChanged) Object.assign(input, settingsInput(settings.settings));
    if (Object.keys(input).length === 0) return setSaved('nothing');
    const change: SavedChange = { statusBefore: tunnel.status, specChanged: specChanged || originMoved, originMoved };
    setSaving(true);
    try {
      const answer = (await request(UpdateTunnelDocument, { id: tunnel.id, input })).updateTunnel;
      accept(answer);
      setSaved(change);
      // The form now shows what the API stored (ports normalised: "443,80" reads back "80,443").
      setName(answer.name ?? '');
      setOriginIp(answer.originIp);
      setDraft(draftOf(settingsOfTunnel(answer)));
    } catch (err) {
      const f = err instanceof ApiFailure ? err : new ApiFailure('server_error', String(err));
      const r = updateRefusal(f.code, f.message);
      setErrors({ [r.field]: t(r.key, r.params) });
    } finally {
      setSaving(false);
    }
  };

  // `tunnel` is the freshest view (the answer, then live events): pending turns to applied by itself.
  const outcome = saved === 'nothing' ? 'nothing' : saved && saveOutcome(saved, tunnel);
  const clear = (field: UpdateField) => {
    if (errors[field]) setErrors({ ...errors, [field]: undefined });
    setSaved(undefined);
  };
  return (
    <form class="tunnel-settings" noValidate onSubmit={submit}>
      <Field label={t('tunnel.name')} hint={t('tunnel.name.hint')} error={errors.name}>
        {(attrs) => <input {...attrs} value={name} maxLength={100} autocomplete="off" onInput={(e) => (setName(e.currentTarget.value), clear('name'))} />}
      </Field>
      <Field label={t('tunnel.originIp')} hint={t('tunnel.origin.hint')} error={errors.originIp}>
        {(attrs) => <input {...attrs} value={originIp} class="mono" inputMode="decimal" autocomplete="off" spellcheck={false} onInput={(e) => (setOriginIp(e.currentTarget.value), clear('originIp'))} />}
      </Field>
      {originMoved && (tunnel.status === 'ACTIVE' || tunnel.status === 'PROVISIONED' || tunnel.status === 'PROVISIONING') && (
        <p class="warning" data-testid="origin-warning">
          {t('tunnel.origin.warning')}
        </p>
      )}
      <ProtectionFields
        draft={draft}
        onChange={(d) => {
          setDraft(d);
          setSaved(undefined);
          if (SETTINGS_FIELDS.some((f) => errors[f])) setErrors({ name: errors.name, originIp: errors.originIp, form: errors.form });
        }}
        errors={errors}
      />
      {errors.form && (
        <div class="alert" role="alert">
          <p>{errors.form}</p>
        </div>
      )}
      {outcome && (
        <p class={outcome === 'applied' || outcome === 'saved' || outcome === 'stored' || outcome === 'nothing' ? 'notice' : 'warning'} role="status" data-testid="save-outcome" data-outcome={outcome}>
          {t(`tunnel.saved.${outcome}`)}
        </p>
      )}
      <button type="submit" class="primary" disabled={saving}>
        {saving ? t('common.saving') : t('tunnel.save')}
      </button>
    </form>
  );
}

function Delete(props: { tunnel: Tunnel; accept: Accept }) {
  const t = useT();
  const { tunnel, accept } = props;
  const [running, setRunning] = useState(false);
  const [failure, setFailure] = useState<ApiFailure | undefined>(undefined);
  const remove = async () => {
    if (running) return;
    setRunning(true);
    setFailure(undefined);
    try {
      accept((await request(DeleteTunnelDocument, { id: tunnel.id })).deleteTunnel);
    } catch (e) {
      setFailure(e instanceof ApiFailure ? e : new ApiFailure('server_error', String(e)));
    } finally {
      setRunning(false);
    }
  };
  return (
    <section aria-labelledby="delete-title">
      <h2 id="delete-title">{t('tunnel.delete.title')}</h2>
      <TypedConfirm
        label={t('tunnel.delete.button')}
        phrase={tunnel.protectedIp}
        prompt={t('tunnel.delete.prompt', { ip: tunnel.protectedIp })}
        consequence={t('tunnel.delete.consequence', { ip: tunnel.protectedIp })}
        onConfirm={remove}
        running={running}
        failure={failure}
      />
    </section>
  );
}
