// The upgrade test's comparison of answers (test/upgrade/compare-answers.ts): a change, a field gone, a list
// of another length and an addition are each seen, and an addition passes only when the release's
// changelog section names it.
import { describe, expect, it } from 'vitest';
import { changelogSection, compareAnswers, undocumentedAdditions } from './compare-answers.ts';

const CHANGELOG = `# Changelog

## [0.3.0] - 2027-01-01

### Integrators
- Tunnels show \`labels\`.

## [0.2.0] - 2026-11-29

- Something with \`color\`.
`;

describe('comparing answers across an upgrade', () => {
  it('the same answer: nothing differs', () => {
    const a = { status: 200, body: { tunnels: [{ id: 'x', ports: '80', protection: { syn_proxy: false } }], next_cursor: null } };
    expect(compareAnswers(a, structuredClone(a), 'tunnels')).toEqual({ changed: [], added: [] });
  });

  it('a changed value, a field gone, a shorter list and an added field are each named', () => {
    const before = { tunnels: [{ id: 'x', ports: '80', name: 'web' }], webhooks: [1, 2] };
    const after = { tunnels: [{ id: 'x', ports: '443', labels: [] }], webhooks: [1] };
    expect(compareAnswers(before, after, 'a')).toEqual({
      changed: ['a.tunnels[0].ports: "80" then "443"', 'a.tunnels[0].name: gone', 'a.webhooks: [1,2] then [1]'],
      added: ['a.tunnels[0].labels'],
    });
  });

  it("an added field is documented only when the release's own section names it", () => {
    const section = changelogSection(CHANGELOG, '0.3.0');
    expect(section).not.toContain('color');
    expect(undocumentedAdditions(['a.tunnels[0].labels', 'a.tunnels[0].color'], section)).toEqual(['a.tunnels[0].color']);
    expect(() => changelogSection(CHANGELOG, '0.4.0')).toThrow(/no section for 0\.4\.0/);
  });
});
