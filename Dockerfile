# One image for the gateway and the edge agent (the command picks which).

# Build stage: the customer panel's static files (panel/dist), made with the panel's build tools (its
# devDependencies), which the runtime image below never installs. Only panel/dist leaves this stage.
FROM node:24-bookworm-slim AS panel
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
# npm ci needs every workspace's package.json. `prepare` does nothing here (loader/ is not copied yet).
COPY agent/package.json ./agent/
COPY panel/package.json ./panel/
RUN npm ci --no-audit --no-fund
# What the panel may build from besides its own sources: the project's TypeScript options, the shared
# code and the API contracts.
COPY tsconfig.json ./
COPY common ./common
COPY schema ./schema
COPY panel ./panel
RUN npm run build:panel && test -f panel/dist/index.html

FROM node:24-bookworm-slim
WORKDIR /app
# The agent drives the kernel through netlink; the CLI tools are there for operators and the probe.
RUN apt-get update \
 && apt-get install -y --no-install-recommends iproute2 nftables conntrack iputils-ping ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY package.json package-lock.json .npmrc ./
# The agent and the panel are npm workspaces: npm ci needs their package.json files. --omit=dev leaves the
# panel's build tools out: it runs from the files built above.
COPY agent/package.json ./agent/
COPY panel/package.json ./panel/
RUN npm ci --omit=dev --no-audit --no-fund
COPY loader ./loader
COPY common ./common
COPY server ./server
COPY agent ./agent
COPY schema ./schema
# The panel as built in the first stage (served at / from PANEL_DIR's default, /app/panel/dist).
COPY --from=panel /app/panel/dist ./panel/dist
# The agent's bundle is built with the project's TypeScript options, and its manifest records them.
COPY tsconfig.json ./
# The agent's bundle (agent/bin/bundle.mjs; npm ci's `prepare` skipped it above, before the sources were here).
RUN node agent/bin/bundle.mjs
ENV HOST=0.0.0.0 PORT=4000 NODE_ENV=production
# The gateway runs as the image's unprivileged `node` user: the code stays root-owned (read-only to it);
# the one place it may write is DATA_DIR (the embedded database, when no DATABASE_URL is given, and the
# admin socket beside it). The edge agent, which configures the kernel, is started as root instead
# (docker-compose.yml `user: root`).
RUN mkdir -p /app/.data && chown node:node /app/.data
USER node
EXPOSE 4000
CMD ["npm", "start"]
