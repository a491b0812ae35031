// The agent's one journal (agent/housekeeping/journal.ts) on a real file system.
import { appendFileSync, mkdtempSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Journal } from '../../../agent/housekeeping/journal.ts';

type Line = { n: number };
const accept = (v: unknown): Line | undefined => (typeof (v as Line | null)?.n === 'number' ? (v as Line) : undefined);
const tmp = () => mkdtempSync(join(tmpdir(), 'tg-journal-'));

describe('Journal', () => {
  it('creates its directory 0700 and its file 0600, and reads appended lines back in order', () => {
    const dir = join(tmp(), 'state');
    const a = Journal.open(dir, 'j.jsonl', accept);
    expect(a.lines).toEqual([]);
    a.journal.append([{ n: 1 }, { n: 2 }]);
    a.journal.append([{ n: 3 }]);
    expect(a.journal.lineCount).toBe(3);
    a.journal.close();
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(statSync(join(dir, 'j.jsonl')).mode & 0o777).toBe(0o600);
    const b = Journal.open(dir, 'j.jsonl', accept);
    expect(b.lines).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
    expect(b.journal.lineCount).toBe(3);
    b.journal.close();
  });

  it('skips a torn tail and lines its owner does not accept, and counts them', () => {
    const dir = tmp();
    writeFileSync(join(dir, 'j.jsonl'), '{"n":1}\n{"x":2}\n');
    appendFileSync(join(dir, 'j.jsonl'), '{"n":3'); // a crash in the middle of an append
    const { journal, lines, unreadable } = Journal.open(dir, 'j.jsonl', accept);
    expect(lines).toEqual([{ n: 1 }]);
    expect(unreadable).toBe(2);
    expect(journal.lineCount).toBe(3);
    journal.close();
  });

  it('rewrite replaces the file with exactly the given lines, leaves no temporary file, and appends after them', () => {
    const dir = tmp();
    const { journal } = Journal.open(dir, 'j.jsonl', accept);
    journal.append([{ n: 1 }, { n: 2 }, { n: 3 }]);
    journal.rewrite([{ n: 3 }]);
    expect(journal.lineCount).toBe(1);
    journal.append([{ n: 4 }]);
    journal.close();
    expect(readFileSync(join(dir, 'j.jsonl'), 'utf8')).toBe('{"n":3}\n{"n":4}\n');
    expect(readdirSync(dir)).toEqual(['j.jsonl']);
    expect(statSync(join(dir, 'j.jsonl')).mode & 0o777).toBe(0o600);
  });

  it('refuses to write once closed', () => {
    const { journal } = Journal.open(tmp(), 'j.jsonl', accept);
    journal.close();
    expect(() => journal.append([{ n: 1 }])).toThrow(/closed/);
  });
});
