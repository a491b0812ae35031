// The REST API reference: schema/openapi.yaml as a page, grouped by tag, each operation with its method,
// path, words, parameters, request body, responses with a compact schema view, and the error codes each
// response can carry. The document arrives as JSON data in this page's own chunk (the build turns the YAML
// into JSON, panel/build/build.mjs), so the first page does not carry it and the browser parses no YAML.
import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import openapi from '../../../../../schema/openapi.yaml';
import { useT } from '../../../i18n/index.ts';
import { Page } from '../../../ui/components.tsx';
import { Link } from '../../../ui/Link.tsx';
import {
  constraints,
  errorCodes,
  groupByTag,
  isErrorStatus,
  mergeAllOf,
  refName,
  resolve,
  sortedStatuses,
  typeLabel,
  type OpenApiDocument,
  type OperationView,
  type Parameter,
  type RequestBody,
  type Response,
  type SchemaObject,
} from './openapi.ts';
import { blocks, inline } from './prose.ts';

// The document is the repository's own, checked against the routes by the server's tests; this page
// only reads it.
const doc = openapi as OpenApiDocument;

export function ApiReference() {
  const t = useT();
  const groups = groupByTag(doc);
  // A link to one operation (/developers/api#post-api-dedicated) opens there: the browser looked for the
  // fragment before this chunk had rendered it.
  useEffect(() => {
    const id = decodeURIComponent(location.hash.slice(1));
    if (id) document.getElementById(id)?.scrollIntoView();
  }, []);
  return (
    <Page title={t('developers.api.title')}>
      <p class="muted">
        {t('developers.api.version', { title: doc.info.title, version: doc.info.version })}{' '}
        <a href="/api/openapi.json">{t('developers.api.download')}</a> · <Link href="/developers/graphql">{t('developers.graphqlLink')}</Link>
      </p>
      {doc.info.description && (
        <details class="api-intro">
          <summary>{t('developers.api.about')}</summary>
          <Prose text={doc.info.description} />
        </details>
      )}
      <nav aria-label={t('developers.api.contents')} class="api-toc">
        <h2>{t('developers.api.contents')}</h2>
        <ul>
          {groups.map((g) => (
            <li key={g.name}>
              <a href={`#tag-${g.name}`}>{g.name}</a>
              <ul>
                {g.operations.map((o) => (
                  <li key={o.anchor}>
                    <a href={`#${o.anchor}`}>
                      <span class={`method method-${o.method}`}>{o.webhook ? t('developers.api.webhook') : o.method.toUpperCase()}</span> <code>{o.path}</code>
                    </a>
                  </li>
                ))}
              </ul>
            </li>
          ))}
        </ul>
      </nav>
      {groups.map((g) => (
        <section key={g.name} aria-labelledby={`tag-${g.name}`}>
          <h2 id={`tag-${g.name}`} class="api-tag">
            {g.name}
          </h2>
          {g.description && <Prose text={g.description} />}
          {g.operations.map((o) => (
            <OperationBlock key={o.anchor} view={o} />
          ))}
        </section>
      ))}
    </Page>
  );
}

function OperationBlock(props: { view: OperationView }) {
  const t = useT();
  const { method, path, operation, parameters, webhook, anchor } = props.view;
  const body = resolve<RequestBody>(doc, operation.requestBody);
  const statuses = sortedStatuses(operation.responses);
  const open = operation.security?.length === 0;
  return (
    <article class="api-op" aria-labelledby={anchor}>
      <h3 id={anchor}>
        <span class={`method method-${method}`}>{method.toUpperCase()}</span> <code class="api-path">{path}</code>
      </h3>
      {operation.summary && <p class="api-summary">{operation.summary}</p>}
      <p class="muted">
        {webhook && `${t('developers.api.webhookSent')} `}
        {operation.deprecated && `${t('developers.api.deprecated')} `}
        {open && t('developers.api.noAuth')}
      </p>
      {operation.description && <Prose text={operation.description} />}
      {parameters.length > 0 && <Parameters parameters={parameters} />}
      {body && (
        <>
          <h4>{t('developers.api.requestBody')}</h4>
          {body.description && <Prose text={body.description} />}
          {Object.entries(body.content ?? {}).map(([type, media]) => (
            <div key={type}>
              <p class="muted">
                <code>{type}</code> {body.required ? t('developers.api.required') : t('developers.api.optional')}
              </p>
              {media.schema && <SchemaView schema={media.schema} seen={[]} open />}
            </div>
          ))}
        </>
      )}
      {statuses.length > 0 && (
        <>
          <h4>{t('developers.api.responses')}</h4>
          <dl class="api-responses">
            {statuses.map((status) => (
              <ResponseItem key={status} status={status} response={resolve<Response>(doc, operation.responses![status])} codes={errorCodes(doc, operation.responses![status])} />
            ))}
          </dl>
        </>
      )}
    </article>
  );
}

function Parameters(props: { parameters: Parameter[] }) {
  const t = useT();
  return (
    <>
      <h4>{t('developers.api.parameters')}</h4>
      <div class="table-wrap">
        <table class="api-params">
          <thead>
            <tr>
              <th scope="col">{t('developers.api.col.name')}</th>
              <th scope="col">{t('developers.api.col.in')}</th>
              <th scope="col">{t('developers.api.col.type')}</th>
              <th scope="col">{t('developers.api.col.description')}</th>
            </tr>
          </thead>
          <tbody>
            {props.parameters.map((p) => (
              <tr key={`${p.in}:${p.name}`}>
                <td>
                  <code>{p.name}</code>
                  {p.required && <span class="req"> {t('developers.api.required')}</span>}
                </td>
                <td>{p.in}</td>
                <td>
                  <code>{typeLabel(doc, p.schema)}</code>
                </td>
                <td>{p.description && <Prose text={p.description} />}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}

function ResponseItem(props: { status: string; response: Response | undefined; codes: string[] }) {
  const t = useT();
  const { status, response, codes } = props;
  if (!response) return null;
  const error = isErrorStatus(status);
  const schema = Object.values(response.content ?? {})[0]?.schema;
  return (
    <>
      <dt>
        <span class={`status ${error ? 'status-error' : 'status-ok'}`}>{status}</span>
        {codes.length > 0 && (
          <span class="api-codes">
            <span class="visually-hidden">{t('developers.api.errorCodes')}:</span>
            {codes.map((c) => (
              <code key={c} class="api-code">
                {c}
              </code>
            ))}
          </span>
        )}
      </dt>
      <dd>
        <Prose text={response.description} />
        {schema && !error && <SchemaView schema={schema} seen={[]} open={false} />}
      </dd>
    </>
  );
}

/** A schema, compactly: a referenced schema opens on demand, and one already open above is not repeated. */
function SchemaView(props: { schema: SchemaObject; seen: readonly string[]; open: boolean }) {
  const t = useT();
  const { schema, seen } = props;
  if (schema.$ref) {
    const name = refName(schema.$ref);
    const target = resolve<SchemaObject>(doc, schema);
    if (!target) return <code>{name}</code>;
    if (seen.includes(schema.$ref))
      return (
        <span class="muted">
          <code>{name}</code> {t('developers.api.seeAbove')}
        </span>
      );
    return (
      <Expand summary={<code>{name}</code>} open={props.open}>
        <SchemaView schema={target} seen={[...seen, schema.$ref]} open={false} />
      </Expand>
    );
  }
  const merged = mergeAllOf(doc, schema, new Set(seen));
  const alternatives = merged.oneOf ?? merged.anyOf;
  if (alternatives)
    return (
      <div class="schema">
        <p class="muted">{t('developers.api.oneOf')}</p>
        <ul>
          {alternatives.map((alt, i) => (
            <li key={i}>
              <SchemaView schema={alt} seen={seen} open={false} />
            </li>
          ))}
        </ul>
      </div>
    );
  if (merged.properties) return <Properties schema={merged} seen={seen} />;
  if (merged.items) {
    return (
      <div class="schema">
        <code>{typeLabel(doc, merged)}</code>
        {merged.items.$ref || merged.items.properties ? <SchemaView schema={merged.items} seen={seen} open={false} /> : null}
      </div>
    );
  }
  return (
    <div class="schema">
      <code>{typeLabel(doc, merged)}</code> {constraints(merged).join(', ')}
      {merged.description && <Prose text={merged.description} />}
    </div>
  );
}

function Properties(props: { schema: SchemaObject; seen: readonly string[] }) {
  const t = useT();
  const required = new Set(props.schema.required ?? []);
  return (
    <dl class="schema schema-props">
      {Object.entries(props.schema.properties ?? {}).map(([name, prop]) => {
        const nested = prop.$ref || prop.properties || prop.allOf || prop.oneOf || prop.anyOf || prop.items?.$ref || prop.items?.properties;
        const facts = constraints(prop);
        return (
          <div key={name} class="schema-prop">
            <dt>
              <code>{name}</code> <span class="type">{typeLabel(doc, prop)}</span>
              {required.has(name) && <span class="req"> {t('developers.api.required')}</span>}
            </dt>
            <dd>
              {prop.description && <Prose text={prop.description} />}
              {facts.length > 0 && <p class="muted">{facts.join(', ')}</p>}
              {nested && <SchemaView schema={prop.items?.$ref || prop.items?.properties ? prop.items : prop} seen={props.seen} open={false} />}
            </dd>
          </div>
        );
      })}
    </dl>
  );
}

/** A disclosure whose content is rendered only once opened: a large schema costs nothing until read. */
function Expand(props: { summary: ComponentChildren; open: boolean; children: ComponentChildren }) {
  const [open, setOpen] = useState(props.open);
  return (
    <details class="schema-ref" open={open} onToggle={(e) => setOpen(e.currentTarget.open)}>
      <summary>{props.summary}</summary>
      {open && props.children}
    </details>
  );
}

function Prose(props: { text: string }) {
  return (
    <div class="prose">
      {blocks(props.text).map((b, i) =>
        b.kind === 'paragraph' ? (
          <p key={i}>
            <Inline text={b.text} />
          </p>
        ) : (
          <ul key={i}>
            {b.items.map((item, j) => (
              <li key={j}>
                <Inline text={item} />
              </li>
            ))}
          </ul>
        ),
      )}
    </div>
  );
}

function Inline(props: { text: string }) {
  return (
    <>
      {inline(props.text).map((run, i) =>
        run.kind === 'code' ? <code key={i}>{run.text}</code> : run.kind === 'strong' ? <strong key={i}>{run.text}</strong> : run.kind === 'em' ? <em key={i}>{run.text}</em> : run.text,
      )}
    </>
  );
}
