// Accessibility and small-screen checks for any page a browser test opens (the storefront's bar: no serious
// or critical axe-core violation, no horizontal scrolling at 375 pixels).
//
// axe-core is injected with page.evaluate (its source evaluated over the DevTools protocol), not with
// addScriptTag: the panel's and the issuer's Content-Security-Policy forbid inline script, and the tests keep
// that policy in force (no bypassCSP), so a page that breaks it shows up as a console error.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { AxeResults, ImpactValue } from 'axe-core';
import type { Page } from 'playwright-core';

const AXE_SOURCE = readFileSync(path.resolve(import.meta.dirname, '../../node_modules/axe-core/axe.min.js'), 'utf8');
const BLOCKING: readonly ImpactValue[] = ['serious', 'critical'];

/** One serious or critical violation, short enough to read in a failed assertion. */
export interface A11yViolation {
  /** The page, as the test named it. */
  page: string;
  rule: string;
  impact: ImpactValue;
  help: string;
  /** CSS selectors of the offending elements (at most five). */
  targets: string[];
}

/**
 * Runs axe-core (WCAG 2.x A and AA rules and best practices) on the page as it is now; answers the
 * serious and critical violations, labelled `label` (a test asserts the list is empty).
 */
export async function checkA11y(page: Page, label: string): Promise<A11yViolation[]> {
  const injected = await page.evaluate('typeof window.axe === "object"');
  if (!injected) await page.evaluate(AXE_SOURCE);
  const results = (await page.evaluate(
    `window.axe.run(document, { resultTypes: ['violations'], runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice'] } })`,
  )) as AxeResults;
  return results.violations
    .filter((v) => v.impact != null && BLOCKING.includes(v.impact))
    .map((v) => ({ page: label, rule: v.id, impact: v.impact!, help: v.help, targets: v.nodes.slice(0, 5).map((n) => n.target.join(' ')) }));
}

/**
 * Whether the page fits `width` CSS pixels without horizontal scrolling (the document's scroll width is at
 * most its client width): true, or a sentence naming the widest elements, for the assertion's message. The
 * viewport is set to `width` for the check and put back after.
 */
export async function fitsWidth(page: Page, width: number): Promise<true | string> {
  const before = page.viewportSize();
  await page.setViewportSize({ width, height: before?.height ?? 800 });
  try {
    // Two frames: the resize's layout is done before it is measured.
    const r = (await page.evaluate(`new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(() => {
      const s = document.scrollingElement;
      const wide = [...document.querySelectorAll('body *')]
        .filter((e) => e.getBoundingClientRect().right > s.clientWidth + 0.5)
        .slice(0, 5)
        .map((e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && typeof e.className === 'string' ? '.' + e.className.trim().split(/\\s+/).join('.') : '') + ' right=' + Math.round(e.getBoundingClientRect().right));
      resolve({ scrollWidth: s.scrollWidth, clientWidth: s.clientWidth, wide });
    })))`)) as { scrollWidth: number; clientWidth: number; wide: string[] };
    if (r.scrollWidth <= r.clientWidth) return true;
    return `at ${width} px the page scrolls sideways: scrollWidth ${r.scrollWidth} > clientWidth ${r.clientWidth}; past the edge: ${r.wide.join(', ') || '(none found)'}`;
  } finally {
    if (before) await page.setViewportSize(before);
  }
}
