# The runtime stage of deploy/docker/Dockerfile on the locally made Debian base
# (build-local-images.sh): same user, directories, health check and entrypoint, no package
# download (ca-certificates and busybox-static come with the base). Everything but the binary
# is here, so each service image adds one layer: with the vfs storage driver every build
# step copies the whole file system.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY pulse-healthcheck /usr/local/bin/pulse-healthcheck
RUN groupadd --system --gid 10001 pulse \
 && useradd --system --uid 10001 --gid pulse --home-dir /var/lib/pulse --shell /usr/sbin/nologin pulse \
 && install -d -o pulse -g pulse -m 0750 /var/lib/pulse /var/lib/pulse/secrets /var/lib/pulse/agent
ENV PULSE_STATE_DIR=/var/lib/pulse
USER 10001:10001
WORKDIR /var/lib/pulse
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 CMD ["/usr/local/bin/pulse-healthcheck"]
ENTRYPOINT ["/usr/local/bin/pulse-entrypoint"]
