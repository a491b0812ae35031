// server/cli/table.ts, the admin CLI's `--format table`, on shapes the integration test
// (test/integration/cli-read.test.ts) does not reach with its seeded data: control characters in a value
// (one row stays one line), nested objects and arrays, keys only some items have, an empty show.
import { describe, expect, it } from 'vitest';
import { renderTable } from '../../server/cli/table.ts';

describe('renderTable', () => {
  it('one line per item whatever a value holds; union of keys in order; nested values readable', () => {
    const out = renderTable({
      items: [
        { id: 'a', name: 'two\nlines\tand\\tab', events: ['tunnel.down', 'tunnel.up'], tunnels: { active: 2, failed: 0 }, last_poll: null },
        { id: 'bb', name: 'x', events: [], tunnels: { active: 0 }, last_poll: { at: 'T', reachable: false }, extra: 1.5 },
      ],
      next_cursor: null,
    });
    expect(out.split('\n')).toEqual([
      'id  name                  events                  tunnels   last_poll             extra',
      'a   two\\nlines\\tand\\\\tab  tunnel.down, tunnel.up  active=2  -                     -',
      'bb  x                     -                       -         at=T reachable=false  1.5',
      '',
    ]);
  });

  it('an empty list says so, and keeps the cursor line; a show is key and value lines', () => {
    expect(renderTable({ items: [], next_cursor: null })).toBe('(none)\n');
    expect(renderTable({ items: [{ a: 1 }], next_cursor: 'CUR' })).toBe('a\n1\nnext_cursor: CUR\n');
    expect(renderTable({ node_id: 'n', free: 0, pool: null })).toBe('node_id  n\nfree     0\npool     -\n');
    // An object with `items` and other keys is a show, not a page.
    expect(renderTable({ items: [1], total: 2 })).toBe('items  1\ntotal  2\n');
  });
});
