// The few building blocks every page uses. Each control has an accessible name (a visible label, or
// aria-label when the text is an icon or a value), so tests and screen readers find them alike.
import type { ComponentChildren, JSX } from 'preact';
import { useEffect, useId, useRef, useState } from 'preact/hooks';
import type { ApiFailure } from '../api/graphql.ts';
import { useT } from '../i18n/index.ts';
import type { MessageKey } from '../i18n/en.ts';

/** A page: its heading takes the focus when the page opens, so a screen reader announces where it is. */
export function Page(props: { title: string; children: ComponentChildren; actions?: ComponentChildren }) {
  const heading = useRef<HTMLHeadingElement>(null);
  useEffect(() => {
    document.title = `${props.title} · Tunnelgate`;
    heading.current?.focus();
  }, [props.title]);
  return (
    <section class="page" aria-labelledby="page-title">
      <header class="page-head">
        <h1 id="page-title" tabIndex={-1} ref={heading}>
          {props.title}
        </h1>
        {props.actions}
      </header>
      {props.children}
    </section>
  );
}

export function Loading() {
  const t = useT();
  return (
    <p class="muted" role="status">
      {t('common.loading')}
    </p>
  );
}

/** An API refusal in words, with a retry when there is something to retry. */
export function Failure(props: { failure: ApiFailure; retry?: () => void }) {
  const t = useT();
  return (
    <div class="alert" role="alert">
      <p>{t('common.error', { message: props.failure.message })}</p>
      {props.retry && (
        <button type="button" onClick={props.retry}>
          {t('common.retry')}
        </button>
      )}
    </div>
  );
}

export function Badge(props: { kind: 'status' | 'health'; value: string }) {
  const t = useT();
  const word = t(`${props.kind}.${props.value}` as MessageKey);
  return (
    <span class={`badge badge-${props.kind} badge-${props.value.toLowerCase()}`} aria-label={t(`badge.${props.kind}`, { value: word })} data-value={props.value}>
      {word}
    </span>
  );
}

/** A labelled form field with its hint and its error; the input gets aria-invalid and aria-describedby. */
export function Field(props: {
  label: string;
  hint?: string;
  error?: string | undefined;
  children: (attrs: { id: string; 'aria-invalid': boolean; 'aria-describedby': string | undefined }) => JSX.Element;
}) {
  const id = useId();
  const hintId = props.hint ? `${id}-hint` : undefined;
  const errorId = props.error ? `${id}-error` : undefined;
  const describedBy = [hintId, errorId].filter(Boolean).join(' ') || undefined;
  return (
    <div class={`field${props.error ? ' field-invalid' : ''}`}>
      <label for={id}>{props.label}</label>
      {props.children({ id, 'aria-invalid': Boolean(props.error), 'aria-describedby': describedBy })}
      {props.hint && (
        <p class="hint" id={hintId}>
          {props.hint}
        </p>
      )}
      {props.error && (
        <p class="error" id={errorId} role="alert">
          {props.error}
        </p>
      )}
    </div>
  );
}

/** Copies `text` to the clipboard; says "Copied" for a moment. `label` names what is copied. */
export function CopyButton(props: { text: string; label: string }) {
  const t = useT();
  const [copied, setCopied] = useState(false);
  return (
    <button
      type="button"
      aria-label={`${t('common.copy')}: ${props.label}`}
      onClick={async () => {
        await navigator.clipboard.writeText(props.text);
        setCopied(true);
        setTimeout(() => setCopied(false), 1500);
      }}
    >
      {copied ? t('common.copied') : t('common.copy')}
    </button>
  );
}

/** Downloads `text` as a file named `filename`. */
export function DownloadButton(props: { text: string; filename: string; label: string }) {
  const t = useT();
  return (
    <button
      type="button"
      aria-label={`${t('common.download')}: ${props.label}`}
      onClick={() => {
        const url = URL.createObjectURL(new Blob([props.text], { type: 'text/plain' }));
        const a = document.createElement('a');
        a.href = url;
        a.download = props.filename;
        a.click();
        setTimeout(() => URL.revokeObjectURL(url), 1000);
      }}
    >
      {t('common.download')}
    </button>
  );
}

/**
 * A destructive action behind a typed confirmation: the button stays disabled until `phrase` is typed.
 * `consequence` says in words what happens.
 */
export function TypedConfirm(props: { label: string; phrase: string; consequence: string; prompt: string; onConfirm: () => void; running: boolean; failure?: ApiFailure | undefined }) {
  const t = useT();
  const [typed, setTyped] = useState('');
  return (
    <div class="danger-zone">
      <p>{props.consequence}</p>
      <Field label={props.prompt}>
        {(attrs) => <input {...attrs} value={typed} autocomplete="off" spellcheck={false} onInput={(e) => setTyped(e.currentTarget.value)} />}
      </Field>
      {props.failure && <Failure failure={props.failure} />}
      <button type="button" class="danger" disabled={typed !== props.phrase || props.running} onClick={props.onConfirm}>
        {props.running ? t('common.saving') : props.label}
      </button>
    </div>
  );
}
