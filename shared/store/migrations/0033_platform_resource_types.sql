-- What a platform connector reports (ADR 0013): Proxmox VE nodes, virtual machines, system
-- containers and physical disks, beside hosts, app containers, services and storage. A
-- resource's parent may be another resource of the same agent (a guest's node), not only the
-- agent's host; `parent_id` already holds any canonical id.

ALTER TABLE resources DROP CONSTRAINT resources_resource_type_check;
ALTER TABLE resources ADD CONSTRAINT resources_resource_type_check
    CHECK (resource_type IN ('host', 'app-container', 'service', 'storage', 'node', 'vm',
                             'system-container', 'physical-disk'));
