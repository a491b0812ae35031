// A stand-in for the `react-style-singleton` package, with its API, that the build puts in its place
// (panel/build/build.mjs, resolve.alias). GraphiQL's dialogs lock the page's scroll through
// react-remove-scroll, which writes its rules into a <style> element it adds at run time; the panel's
// Content-Security-Policy (`style-src 'self'`) refuses such an element. This one puts the same rules in a
// constructed stylesheet (CSSStyleSheet.replaceSync, adopted by the document): the CSSOM, which the
// policy allows, so the dialogs behave as designed and the browser reports no violation.
import { useEffect, type FC } from 'react';

export const stylesheetSingleton = () => {
  let counter = 0;
  let sheet: CSSStyleSheet | undefined;
  return {
    add(style: string) {
      if (counter === 0) {
        sheet = new CSSStyleSheet();
        sheet.replaceSync(style);
        document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
      }
      counter++;
    },
    remove() {
      counter--;
      if (counter === 0 && sheet) {
        const gone = sheet;
        document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => s !== gone);
        sheet = undefined;
      }
    },
  };
};

export const styleHookSingleton = () => {
  const sheet = stylesheetSingleton();
  return (styles: string, isDynamic?: boolean) => {
    useEffect(() => {
      sheet.add(styles);
      return () => sheet.remove();
    }, [styles && isDynamic]);
  };
};

export const styleSingleton = (): FC<{ styles: string; dynamic?: boolean }> => {
  const useStyle = styleHookSingleton();
  return ({ styles, dynamic }) => {
    useStyle(styles, dynamic);
    return null;
  };
};

