// The first code of every `node --import ./loader/...` start (both loaders import this module before
// anything else): the gateway and the admin CLI need Node 24 (node:crypto's argon2, module.registerHooks,
// the TypeScript loader's engine), and an older Node, typically the system one run by hand, would
// otherwise die later on a missing export with nothing saying why. npm scripts put the project's own
// Node 24 (the `node` package in node_modules/.bin) first on PATH, so the remedy is to go through npm.
// Nothing here may need a newer Node than it rejects: plain JavaScript, no imports.
const major = Number(process.versions.node.split('.')[0]);

if (major < 24) {
  const script = (process.argv[1] ?? '').replaceAll('\\', '/');
  const command = script.endsWith('/server/cli/admin.ts') ? 'npm run admin -- <command>' : 'npm start';
  process.stderr.write(
    `Tunnelgate needs Node 24 (this is ${process.version}); run it through npm (\`${command}\`), which uses the Node 24 that \`npm install\` put in node_modules\n`,
  );
  process.exit(1);
}
