// How the upgrade test compares what the API answered before and after an upgrade (docs/RELEASES.md "The
// upgrade test"): field by field, where a field may only be added, and only when the release's section of
// CHANGELOG.md names it.
import { readFileSync } from 'node:fs';

/** What differs between two answers: values changed or gone, and the paths of fields only the new one has. */
export interface AnswerDifferences {
  changed: string[];
  added: string[];
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Adds to `out` what differs between `before` and `after` below `path`: a value changed, a field gone, a list
 * of another length (changed), and each field only `after` has (added, as `path.field`).
 */
export function compareAnswers(before: unknown, after: unknown, path: string, out: AnswerDifferences = { changed: [], added: [] }): AnswerDifferences {
  if (isObject(before) && isObject(after)) {
    for (const k of Object.keys(before)) {
      if (!(k in after)) out.changed.push(`${path}.${k}: gone`);
      else compareAnswers(before[k], after[k], `${path}.${k}`, out);
    }
    for (const k of Object.keys(after)) if (!(k in before)) out.added.push(`${path}.${k}`);
    return out;
  }
  if (Array.isArray(before) && Array.isArray(after) && before.length === after.length) {
    before.forEach((b, i) => compareAnswers(b, after[i], `${path}[${i}]`, out));
    return out;
  }
  if (JSON.stringify(before) !== JSON.stringify(after)) out.changed.push(`${path}: ${JSON.stringify(before)} then ${JSON.stringify(after)}`);
  return out;
}

/** The text of a changelog's section for `version`: from its `## [version]` heading to the next one. */
export function changelogSection(changelog: string, version: string): string {
  const start = changelog.indexOf(`## [${version}]`);
  if (start < 0) throw new Error(`CHANGELOG.md has no section for ${version}`);
  const next = changelog.indexOf('\n## [', start + 1);
  return changelog.slice(start, next < 0 ? undefined : next);
}

/** The added paths whose field the section does not name in backquotes (`field`): additions nobody was told of. */
export function undocumentedAdditions(added: readonly string[], section: string): string[] {
  return added.filter((p) => !section.includes(`\`${p.replace(/.*\./, '')}\``));
}

export function readChangelog(path: string): string {
  return readFileSync(path, 'utf8');
}
