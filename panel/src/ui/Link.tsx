import type { ComponentChildren } from 'preact';
import { onLinkClick } from '../app/router.ts';

export function Link(props: { href: string; children: ComponentChildren; class?: string; 'aria-current'?: 'page' | undefined }) {
  return (
    <a href={props.href} class={props.class} aria-current={props['aria-current']} onClick={(e) => onLinkClick(e, props.href)}>
      {props.children}
    </a>
  );
}
