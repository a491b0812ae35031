// The add-webhook form's own checks (panel/src/pages/account/webhook-input.ts).
import { describe, expect, it } from 'vitest';
import { checkWebhookUrl } from '../../panel/src/pages/account/webhook-input.ts';

describe('checkWebhookUrl', () => {
  it('accepts an absolute http(s) URL (the gateway decides whether http is allowed)', () => {
    expect(checkWebhookUrl(' https://hooks.example.com/tg?x=1 ')).toBeUndefined();
    expect(checkWebhookUrl('http://hooks.example.com/')).toBeUndefined();
  });

  it('names the mistake', () => {
    expect(checkWebhookUrl('   ')).toBe('required');
    expect(checkWebhookUrl('hooks.example.com/tg')).toBe('invalid');
    expect(checkWebhookUrl('ftp://hooks.example.com/')).toBe('scheme');
    expect(checkWebhookUrl('https://user:pw@hooks.example.com/')).toBe('credentials');
    expect(checkWebhookUrl('https://hooks.example.com/#x')).toBe('fragment');
  });
});
