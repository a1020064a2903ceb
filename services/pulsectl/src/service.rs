//! The processes a local stack is made of, in start order.

/// Where a service serves `/healthz`, `/readyz` and `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthListener {
    /// On its main HTTP listener (`PULSE_GATEWAY__LISTEN`, `PULSE_RELAY__LISTEN`).
    Main,
    /// On its own `PULSE_HTTP__LISTEN`, chosen by pulsectl.
    Own,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Service {
    /// Name in `/api/health` and in log file names.
    pub name: &'static str,
    pub binary: &'static str,
    pub health: HealthListener,
    /// Whether `/api/health` reports it (the host agent is not a service of the fleet view).
    pub in_fleet_health: bool,
}

/// Start order. pulsectl stops them in the reverse order: the agent and the gateway (the entry
/// points) first, the relay last.
pub const STACK: [Service; 8] = [
    Service {
        name: "agent-relay",
        binary: "pulse-agent-relay",
        health: HealthListener::Main,
        in_fleet_health: true,
    },
    Service {
        name: "connector",
        binary: "pulse-connector",
        health: HealthListener::Own,
        in_fleet_health: true,
    },
    Service {
        name: "verifier",
        binary: "pulse-verifier",
        health: HealthListener::Own,
        in_fleet_health: true,
    },
    Service {
        name: "action-broker",
        binary: "pulse-action-broker",
        health: HealthListener::Own,
        in_fleet_health: true,
    },
    Service {
        name: "model-runner",
        binary: "pulse-model-runner",
        health: HealthListener::Own,
        in_fleet_health: true,
    },
    Service {
        name: "patrol-scheduler",
        binary: "pulse-patrol-scheduler",
        health: HealthListener::Own,
        in_fleet_health: true,
    },
    Service {
        name: "gateway",
        binary: "pulse-gateway",
        health: HealthListener::Main,
        in_fleet_health: true,
    },
    Service {
        name: "agent",
        binary: "pulse-agent",
        health: HealthListener::Own,
        in_fleet_health: false,
    },
];

/// The seven services `/api/health` must report ready, in the order status lines print them.
pub use pulse_domain::fleet::FLEET_SERVICES as FLEET;

pub fn binaries() -> impl Iterator<Item = &'static str> {
    STACK.iter().map(|service| service.binary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_is_exactly_the_services_reported_by_health() {
        let mut from_stack: Vec<&str> = STACK
            .iter()
            .filter(|s| s.in_fleet_health)
            .map(|s| s.name)
            .collect();
        let mut fleet = FLEET.to_vec();
        from_stack.sort_unstable();
        fleet.sort_unstable();
        assert_eq!(from_stack, fleet);
    }

    #[test]
    fn binaries_are_named_after_their_service() {
        for service in STACK {
            assert_eq!(service.binary, format!("pulse-{}", service.name));
        }
    }
}
