# The runtime layer of deploy/docker/Dockerfile, on the locally made Debian base
# (build-local-images.sh): same user, directories and health check, no package download
# (ca-certificates and busybox-static come with the base).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY pulse-healthcheck /usr/local/bin/pulse-healthcheck
RUN groupadd --system --gid 10001 pulse \
 && useradd --system --uid 10001 --gid pulse --home-dir /var/lib/pulse --shell /usr/sbin/nologin pulse \
 && install -d -o pulse -g pulse -m 0750 /var/lib/pulse /var/lib/pulse/secrets /var/lib/pulse/agent
