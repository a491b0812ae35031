// A tunnel's attacks (docs/CONTRACTS.md "Attacks"; DESIGN 3.11): each attack of the last 7 days, newest
// first, with its start and end (or that it goes on), its peak rates, what it was (protocol, ports, the
// protection that dropped most of it) and what the edge dropped and let through.
//
// Live: the list is read again on each message of the page's `tunnelStatus` subscription (Tunnel.tsx fires
// tunnelEvents), which the gateway sends when an attack starts or ends. Read again rather than selected in the
// subscription's fragment: that fragment is also every mutation's answer and every other event's (health, status,
// settings applied), so the attacks would be read and sent with each of them, up to 1,000 records; this way
// one small query follows an event, and the other sections pay nothing. The subscription's first message (the
// tunnel as it is) also reads it again, which covers an attack that started between the first read and the
// subscription's start.
import { useEffect } from 'preact/hooks';
import { useQuery } from '../../../api/hooks.ts';
import { bitRate, packetRate } from '../../../app/format.ts';
import { TunnelAttacksDocument, type TunnelAttacksQuery } from '../../../graphql/generated.ts';
import { formatDateTime, formatNumber, useT } from '../../../i18n/index.ts';
import { Failure, Loading } from '../../../ui/components.tsx';
import { newestFirst, tunnelEvents, vectorWords } from './attacks.ts';

type Attack = TunnelAttacksQuery['tunnel']['attacks'][number];

export function Attacks(props: { tunnelId: string }) {
  const t = useT();
  const q = useQuery(TunnelAttacksDocument, { id: props.tunnelId });
  const { reload } = q;
  useEffect(() => tunnelEvents.on(props.tunnelId, reload), [props.tunnelId, reload]);
  const attacks = q.data ? newestFirst(q.data.tunnel.attacks) : undefined;
  return (
    <section aria-labelledby="attacks-title" class="attacks">
      <h2 id="attacks-title">{t('attacks.title')}</h2>
      <p class="muted">{t('attacks.intro')}</p>
      {/* A failed read again keeps the list it had; the failure shows above it. */}
      {q.failure && <Failure failure={q.failure} retry={reload} />}
      {!attacks && !q.failure && <Loading />}
      {attacks && attacks.length === 0 && (
        <p data-testid="attacks-empty">{t('attacks.empty')}</p>
      )}
      {attacks && attacks.length > 0 && (
        <ol class="attack-list" aria-label={t('attacks.list')}>
          {attacks.map((a) => (
            <AttackItem key={a.id} attack={a} />
          ))}
        </ol>
      )}
    </section>
  );
}

function AttackItem(props: { attack: Attack }) {
  const t = useT();
  const a = props.attack;
  const start = formatDateTime(a.startedAt);
  const end = a.endedAt ? formatDateTime(a.endedAt) : undefined;
  const v = vectorWords(a.vector);
  const titleId = `attack-${a.id}`;
  return (
    <li class={`attack${end ? '' : ' attack-ongoing'}`} data-attack-id={a.id} aria-labelledby={titleId}>
      <h3 id={titleId}>{end ? t('attacks.item.ended', { start, end }) : t('attacks.item.ongoing', { start })}</h3>
      <dl class="facts">
        <dt>{t('attacks.start')}</dt>
        <dd>
          <time dateTime={a.startedAt}>{start}</time>
        </dd>
        <dt>{t('attacks.end')}</dt>
        <dd data-testid="attack-end" aria-live="polite">
          {a.endedAt ? <time dateTime={a.endedAt}>{end}</time> : <span class="badge badge-ongoing">{t('attacks.ongoing')}</span>}
        </dd>
        <dt>{t('attacks.peak')}</dt>
        <dd>{t('attacks.peak.value', { pps: packetRate(a.peakPps), bps: bitRate(a.peakBps) })}</dd>
        <dt>{t('attacks.vector')}</dt>
        <dd>{t('attacks.vector.value', { protocol: t(v.protocol), ports: t(v.ports.key, v.ports.params), drop: t(v.drop) })}</dd>
        <dt>{t('attacks.dropped')}</dt>
        <dd>{t('attacks.packets', { count: formatNumber(a.packetsDropped) })}</dd>
        <dt>{t('attacks.passed')}</dt>
        <dd>{t('attacks.packets', { count: formatNumber(a.packetsPassed) })}</dd>
      </dl>
    </li>
  );
}
