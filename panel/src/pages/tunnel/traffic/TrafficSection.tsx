export function TrafficSection(_props: { tunnelId: string }) { return null; } // placeholder: the traffic chart replaces this file
