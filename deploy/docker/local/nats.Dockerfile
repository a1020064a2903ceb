# nats-server from Debian's package on the local base, for the compose stack on machines that
# cannot pull images. The entrypoint is nats-server, like the official image's.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nats-server \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o 10001 -g 10001 -m 0750 /data
USER 10001:10001
VOLUME /data
ENTRYPOINT ["/usr/sbin/nats-server"]
