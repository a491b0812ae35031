// The language: the one the user picked (remembered in localStorage: a preference, not a credential), else
// the browser's first of ours, else English. `t` looks a key up in the current catalogue.
import { useEffect, useState } from 'preact/hooks';
import { en, type MessageKey } from './en.ts';
import { ru } from './ru.ts';

export const LOCALES = { en, ru } as const;
export type Locale = keyof typeof LOCALES;
export const LOCALE_NAMES: Record<Locale, string> = { en: 'English', ru: 'Русский' };
const STORAGE_KEY = 'tunnelgate.locale';

function initial(): Locale {
  const saved = localStorage.getItem(STORAGE_KEY);
  if (saved === 'en' || saved === 'ru') return saved;
  for (const lang of navigator.languages ?? [navigator.language]) {
    const base = lang.toLowerCase().split('-')[0];
    if (base === 'ru' || base === 'en') return base;
  }
  return 'en';
}

let current: Locale = initial();
const listeners = new Set<() => void>();
document.documentElement.lang = current;

export function locale(): Locale {
  return current;
}

export function setLocale(l: Locale): void {
  current = l;
  localStorage.setItem(STORAGE_KEY, l);
  document.documentElement.lang = l;
  for (const f of listeners) f();
}

export type Params = Record<string, string | number>;

export function t(key: MessageKey, params?: Params): string {
  const text = LOCALES[current][key];
  if (!params) return text;
  return text.replace(/\{(\w+)\}/g, (whole, name: string) => (name in params ? String(params[name]) : whole));
}

/** Re-renders the caller when the language changes; returns `t`. */
export function useT(): typeof t {
  const [, setTick] = useState(0);
  useEffect(() => {
    const l = () => setTick((n) => n + 1);
    listeners.add(l);
    return () => void listeners.delete(l);
  }, []);
  return t;
}

/** Numbers and dates in the current language. */
export function formatNumber(n: number, digits?: number): string {
  return new Intl.NumberFormat(current, digits === undefined ? {} : { minimumFractionDigits: digits, maximumFractionDigits: digits }).format(n);
}

export function formatDateTime(iso: string): string {
  return new Intl.DateTimeFormat(current, { dateStyle: 'medium', timeStyle: 'short' }).format(new Date(iso));
}

export type { MessageKey };
