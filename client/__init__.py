"""The ClientApp: each Flower node is one data owner (node config `partition-id` -> user)."""
