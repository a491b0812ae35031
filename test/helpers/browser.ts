// The browser side of the storefront tests (docs/TESTING.md "Browser tests"): Debian's chromium driven by
// playwright-core, one browser per test file and a fresh context (its own cookies: one signed-in person) per
// session; a recorder of everything that went wrong on any page of a context (console errors, uncaught
// exceptions, requests that failed or answered >= 400, WebSockets that failed), which each test asserts
// empty at its end; and screenshots.
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type BrowserContext, type ConsoleMessage, type Page, type Request, type Response } from 'playwright-core';
import { skipUnless } from './requirements.ts';

export const CHROMIUM = '/usr/bin/chromium';
export const haveChromium = existsSync(CHROMIUM);
/**
 * For describe.skipIf: skipped without chromium on a developer's machine, a failure in CI
 * (test/helpers/requirements.ts). `what`: the file's tests, in words.
 */
export const skipWithoutChromium = (what: string): boolean => skipUnless(haveChromium, `${what}: ${CHROMIUM} (apt-get install chromium)`);

/**
 * As test/browser/login.test.ts: no sandbox (the tests run as root), no GPU, and nothing that reaches out on
 * its own (component updates, sync, background networking), so every request a page makes is the page's.
 */
export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];

export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS });
}

const ROOT = path.resolve(import.meta.dirname, '../..');
/** Every screenshot lands here (git-ignored). */
export const ARTIFACTS = path.join(ROOT, 'test-results/browser');
/** With TUNNELGATE_SCREENSHOTS=1, the README's screenshots are also written here (committed). */
export const DOC_SCREENSHOTS = path.join(ROOT, 'docs/screenshots');

/**
 * A screenshot of the page as `name`.png in test-results/browser/. One README shows (`readme`) is also
 * written to docs/screenshots/ when TUNNELGATE_SCREENSHOTS=1, so an ordinary run never changes the tree.
 */
export async function screenshot(page: Page, name: string, opts: { fullPage?: boolean; readme?: boolean } = {}): Promise<string> {
  mkdirSync(ARTIFACTS, { recursive: true });
  const file = path.join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path: file, fullPage: opts.fullPage ?? true, animations: 'disabled' });
  if (opts.readme && process.env.TUNNELGATE_SCREENSHOTS === '1') {
    mkdirSync(DOC_SCREENSHOTS, { recursive: true });
    copyFileSync(file, path.join(DOC_SCREENSHOTS, `${name}.png`));
  }
  return file;
}

/**
 * Something a test provokes on purpose and which is therefore no problem: a response with `status` (any
 * status >= 400 when unset) or a failed request (`failure` matched against its error text) for a URL that
 * `url` matches. `why` names the test's reason; it shows in the report of what was excused.
 */
export interface Expected {
  why: string;
  url: RegExp;
  status?: number;
  failure?: RegExp;
}

/** One thing that went wrong on a page. */
export interface Problem {
  kind: 'console' | 'pageerror' | 'response' | 'requestfailed' | 'websocket';
  text: string;
  url?: string;
}

/**
 * Records what went wrong on every page of a context. A test allows what it provokes (`expect`), and at its
 * end asserts `problems()` is empty. Chromium also logs a console error for each response >= 400
 * ("Failed to load resource: ... status of 404"); that line is excused with the response it reports.
 */
export class ProblemRecorder {
  private readonly seen: Problem[] = [];
  private readonly expected: Expected[] = [];
  /** What was excused, and by which reason (for a test that wants to see its provocation happened). */
  readonly excused: { problem: Problem; why: string }[] = [];

  constructor(context: BrowserContext) {
    context.on('console', (m) => this.console(m));
    context.on('weberror', (e) => this.add({ kind: 'pageerror', text: e.error().stack ?? e.error().message, url: e.page()?.url() }));
    context.on('response', (r) => this.response(r));
    context.on('requestfailed', (r) => this.failed(r));
    context.on('page', (page) =>
      page.on('websocket', (ws) => {
        ws.on('socketerror', (text) => this.add({ kind: 'websocket', text, url: ws.url() }));
      }),
    );
  }

  /** Allows one kind of failure this test provokes (see Expected). */
  expect(e: Expected): void {
    this.expected.push(e);
  }

  /** Everything unexpected so far, as lines (an empty list is the test's pass). */
  problems(): string[] {
    return this.seen.map((p) => `${p.kind}: ${p.text}${p.url ? ` (${p.url})` : ''}`);
  }

  /** Forgets what was recorded (a test that starts where another left off). */
  clear(): void {
    this.seen.length = 0;
    this.excused.length = 0;
  }

  private add(p: Problem, status?: number): void {
    const e = this.expected.find((x) => p.url !== undefined && x.url.test(p.url) && matches(x, p, status));
    if (e) this.excused.push({ problem: p, why: e.why });
    else this.seen.push(p);
  }

  private console(m: ConsoleMessage): void {
    if (m.type() !== 'error') return;
    const text = m.text();
    const where = m.location().url;
    // Chromium's own line for a response >= 400: judged with the response itself (excused when it is).
    if (/^Failed to load resource: the server responded with a status of \d+/.test(text)) {
      return this.add({ kind: 'console', text, url: where }, Number(/status of (\d+)/.exec(text)![1]));
    }
    this.add({ kind: 'console', text, url: where || m.page()?.url() });
  }

  /** Requests that were answered (their headers arrived), whatever became of their bodies. */
  private readonly answered = new WeakSet<Request>();

  private response(r: Response): void {
    this.answered.add(r.request());
    if (r.status() < 400) return;
    this.add({ kind: 'response', text: `${r.status()} ${r.request().method()}`, url: r.url() }, r.status());
  }

  private failed(r: Request): void {
    // Answered, then cut while its body was still on the way because the page navigated (a client that
    // reads only the status, like oauth4webapi's revocation before the panel's sign-out form): the request
    // did not fail; its status was judged above.
    if (this.answered.has(r) && r.failure()?.errorText === 'net::ERR_ABORTED') return;
    this.add({ kind: 'requestfailed', text: `${r.failure()?.errorText ?? 'failed'} ${r.method()}`, url: r.url() });
  }
}

/**
 * Whether an expectation covers a problem at its URL: a status (a response, or Chromium's console line for
 * one) when the expectation names no failure text; otherwise a failed request, a page error or another
 * console error whose text the expectation's `failure` matches.
 */
function matches(x: Expected, p: Problem, status: number | undefined): boolean {
  if (status !== undefined) return x.failure === undefined && (x.status === undefined || x.status === status);
  return x.failure !== undefined && x.failure.test(p.text);
}

/** One person's browser session: a fresh context (its own cookies), its first page, its problem recorder. */
export interface Session {
  context: BrowserContext;
  page: Page;
  problems: ProblemRecorder;
  close(): Promise<void>;
}

/**
 * A fresh context of `browser` with one page. Actions and auto-waiting expectations get a bound that
 * turns a hang into a failure on a loaded host, never a timing check.
 */
export async function openSession(browser: Browser, opts: { width?: number; height?: number; clipboard?: boolean } = {}): Promise<Session> {
  const context = await browser.newContext({
    viewport: { width: opts.width ?? 1280, height: opts.height ?? 900 },
    locale: 'en-US',
    timezoneId: 'UTC',
    // For a test of a copy button: what the page wrote is read back with readClipboard().
    ...(opts.clipboard ? { permissions: ['clipboard-read', 'clipboard-write'] } : {}),
  });
  context.setDefaultTimeout(30_000);
  const problems = new ProblemRecorder(context);
  const page = await context.newPage();
  return { context, page, problems, close: () => context.close() };
}

/**
 * Signs in to the panel at `panelUrl` the way a person does: the panel sends the browser to the issuer's
 * login page (server/oidc/pages.ts), the email and password are entered there, and the issuer sends it back
 * to the panel (its first-party client has no consent screen). With `keyboard`, only the keyboard is used
 * (Tab to each field, Enter to submit). Resolves once the panel shows its navigation, signed in.
 */
/** What the page put on the clipboard (a session opened with `clipboard: true`). */
export async function readClipboard(page: Page): Promise<string> {
  return (await page.evaluate('navigator.clipboard.readText()')) as string;
}

/**
 * Keyboard-only navigation: presses Tab (Shift+Tab with `back`) until the focused element's accessible name
 * (aria-label, aria-labelledby, its label, or its text) matches `name`; answers that name. Fails after
 * `max` presses, listing what got focus on the way, so a control that cannot be reached by keyboard fails
 * the test that needs it.
 */
export async function tabTo(page: Page, name: RegExp, opts: { back?: boolean; max?: number } = {}): Promise<string> {
  const visited: string[] = [];
  for (let i = 0; i < (opts.max ?? 80); i++) {
    await page.keyboard.press(opts.back ? 'Shift+Tab' : 'Tab');
    const focused = (await page.evaluate(`(() => {
      const e = document.activeElement;
      if (!e || e === document.body) return '';
      const by = e.getAttribute('aria-labelledby');
      const named = e.getAttribute('aria-label') || (by && by.split(/\\s+/).map((id) => document.getElementById(id)?.innerText ?? '').join(' ')) || (e.labels && e.labels[0] && e.labels[0].innerText) || e.innerText || e.value || e.getAttribute('title') || '';
      return named.trim().replace(/\\s+/g, ' ');
    })()`)) as string;
    visited.push(focused);
    if (name.test(focused)) return focused;
  }
  throw new Error(`no focusable element named ${name} within ${opts.max ?? 80} Tab presses; focus went through: ${visited.join(' | ')}`);
}

/** Where the sign-in round trip passes on the gateway's origin: the panel's callback and the issuer's pages. */
const SIGN_IN_PATHS = /^\/(callback|interaction|oauth)(\/|$)/;

export async function signIn(page: Page, panelUrl: string, who: { email: string; password: string }, opts: { keyboard?: boolean; path?: string } = {}): Promise<void> {
  const panel = new URL(panelUrl);
  await page.goto(new URL(opts.path ?? '/', panel).href);
  await page.locator('form input[name=password]').waitFor();
  if (opts.keyboard) {
    // The login page focuses its email field (autofocus).
    await page.keyboard.type(who.email);
    await page.keyboard.press('Tab');
    await page.keyboard.type(who.password);
    await Promise.all([page.waitForURL((u) => u.origin === panel.origin && !SIGN_IN_PATHS.test(u.pathname)), page.keyboard.press('Enter')]);
  } else {
    await page.getByLabel('Email').fill(who.email);
    await page.getByLabel('Password').fill(who.password);
    await Promise.all([page.waitForURL((u) => u.origin === panel.origin && !SIGN_IN_PATHS.test(u.pathname)), page.getByRole('button', { name: 'Sign in' }).click()]);
  }
  await page.locator('header nav').waitFor();
}
