// What the register-application form checks before sending, by the gateway's own rules (docs/CONTRACTS.md
// "Developer portal"): redirect URIs one per line, compared exactly at authorize, https except on the
// loopback addresses where a developer's own machine receives the code (RFC 8252 7.3); API access never
// above what the owner's role may do. The gateway checks again; these say the mistake at the field first.

/** At most this many applications per account. */
export const MAX_APPLICATIONS = 20;
export const MAX_REDIRECT_URIS = 20;
const MAX_URI_LENGTH = 2048;
const MAX_NAME_LENGTH = 200;

export type ApiAccessLevel = 'NONE' | 'READ' | 'WRITE';
export type AccountRole = 'OWNER' | 'VIEWER';

/** The API access an application may be given: at most what its owner's role may do (a viewer reads). */
export function allowedApiAccess(role: AccountRole | null | undefined): ApiAccessLevel[] {
  if (role === 'OWNER') return ['NONE', 'READ', 'WRITE'];
  if (role === 'VIEWER') return ['NONE', 'READ'];
  return ['NONE'];
}

export type RedirectUriProblem = 'tooLong' | 'whitespace' | 'invalid' | 'scheme' | 'https' | 'fragment' | 'credentials' | 'duplicate';

export interface RedirectUriCheck {
  /** The URIs, in order, each as typed (they are compared exactly). */
  uris: string[];
  /** The first problem of each line that has one; `line` counts from 1, blank lines included. */
  problems: { line: number; uri: string; problem: RedirectUriProblem }[];
  none: boolean;
  tooMany: boolean;
}

const LOOPBACK = new Set(['127.0.0.1', '[::1]', 'localhost']);

function problemOf(uri: string, earlier: readonly string[]): RedirectUriProblem | undefined {
  if (uri.length > MAX_URI_LENGTH) return 'tooLong';
  if (/[\s\u0000-\u001f\u007f]/.test(uri)) return 'whitespace';
  let u: URL;
  try {
    u = new URL(uri);
  } catch {
    return 'invalid';
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') return 'scheme';
  if (!u.hostname) return 'invalid';
  if (u.protocol === 'http:' && !LOOPBACK.has(u.hostname)) return 'https';
  if (uri.includes('#')) return 'fragment';
  if (u.username || u.password) return 'credentials';
  if (earlier.includes(uri)) return 'duplicate';
  return undefined;
}

/** Reads the redirect URIs field: one URI a line, surrounding spaces and blank lines ignored. */
export function checkRedirectUris(text: string): RedirectUriCheck {
  const uris: string[] = [];
  const problems: RedirectUriCheck['problems'] = [];
  text.split('\n').forEach((raw, i) => {
    const uri = raw.trim();
    if (!uri) return;
    const problem = problemOf(uri, uris);
    if (problem) problems.push({ line: i + 1, uri, problem });
    uris.push(uri);
  });
  return { uris, problems, none: uris.length === 0, tooMany: uris.length > MAX_REDIRECT_URIS };
}

export type NameProblem = 'required' | 'tooLong' | 'control';

export function checkApplicationName(name: string): NameProblem | undefined {
  const n = name.trim();
  if (!n) return 'required';
  if (n.length > MAX_NAME_LENGTH) return 'tooLong';
  if (/[\u0000-\u001f\u007f]/.test(n)) return 'control';
  return undefined;
}
